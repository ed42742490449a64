"""Per-file parse and lineage results, keyed by content hash, kept in the state dir.

Every Dagster run process loads the code location again, so parsing is paid
per run; this cache makes a warm load skip sqlglot entirely. One pickle file
for the whole folder (one read at load), replaced atomically when it changes.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
from pathlib import Path
from typing import Any

# Bump when the parser or the analysis changes what it produces.
CACHE_VERSION = "plan-v2"


def content_hash(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


class PlanCache:
    def __init__(self, directory: Path | None) -> None:
        self.path = directory / f"{CACHE_VERSION}.pickle" if directory else None
        self.entries: dict[str, Any] = {}
        self.used: set[str] = set()
        self.dirty = False
        if self.path and self.path.exists():
            try:
                with self.path.open("rb") as f:
                    entries = pickle.load(f)
            except Exception:  # a corrupt or foreign cache is just a cold start
                entries = {}
            self.entries = entries if isinstance(entries, dict) else {}  # a foreign pickle may load as anything

    def get(self, key: str) -> Any:
        value = self.entries.get(key)
        if value is not None:
            self.used.add(key)
        return value

    def put(self, key: str, value: Any) -> None:
        self.entries[key] = value
        self.used.add(key)
        self.dirty = True

    def save(self) -> None:
        """Write entries used by this load (drops stale ones); never fails the load."""
        if not self.path:
            return
        if not self.dirty and len(self.used) == len(self.entries):
            return
        keep = {k: v for k, v in self.entries.items() if k in self.used}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".plan-")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(keep, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, self.path)
        except OSError:
            pass
