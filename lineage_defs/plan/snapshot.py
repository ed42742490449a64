"""The last load's plan, kept whole in the state dir: a load whose inputs are unchanged reads it in one go.

The plan cache (``plan.cache``) spares a warm load sqlglot, but the load still
reads, hashes and decodes every script and plans the folder again. Every
Dagster run process loads the code location, almost always of a folder nobody
touched since the last load: this snapshot holds that load's plan (``Project``
without its live dbt projects, which come from the dbt load of the moment),
under a key of everything the plan is made from:

- each script's path and ``stat`` (size, inode, mtime and ctime in ns), the
  same for the files of ``LINEAGE_LIBRARY_DIRS``, the folder's path;
- what the dbt projects gave the plan (``DbtPart.fingerprint``);
- lineage_defs' own source files (path, size, mtime), the parser's fingerprint
  (``plan.files.parser_fingerprint``) and the cache version.

An edit changes a file's ctime (which no tool sets back), so an edited,
added, removed or renamed script is a miss and the load plans again through
the per-file cache. A file's stat says nothing of an edit made within the
clock's granularity of the read, so a plan is only kept, and only read, when
every file last changed (content or metadata) more than ``TRUST_AFTER_NS``
before the load began (what git's index calls "racily clean"); a folder
edited a moment ago plans again until then. Data only, decoded by type
(``plan.codec``) like the plan cache: a snapshot that does not decode is a miss.
The file's first line is its version and key; the plan follows on the next, so
a kept plan of another key is not parsed.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lineage_defs.errors import LineageDefsError
from lineage_defs.plan.cache import CACHE_VERSION, write_json
from lineage_defs.plan.codec import CodecError, decode, encode
from lineage_defs.plan.files import parser_fingerprint
from lineage_defs.plan.spec import AnyStep, HookScript, Project, StepHook

if TYPE_CHECKING:  # the dbt room builds on plan, never the other way round
    from lineage_defs.dbt.project import DbtProject

SNAPSHOT_VERSION = "snapshot-v2"  # v2: the key on a first line of its own
FILE_NAME = "plan-snapshot.json"
# A file changed less than this before the load is not trusted by its stat (see the module's doc).
TRUST_AFTER_NS = 2_000_000_000


@dataclass(frozen=True)
class Snapshot:
    """A ``Project`` as kept (its root and dbt projects come from the load that reads it), and what the load adds."""

    steps: tuple[AnyStep, ...]
    externals: tuple[str, ...]
    macros: tuple[str, ...]
    errors: tuple[LineageDefsError, ...]
    warnings: tuple[LineageDefsError, ...]
    invalid_paths: tuple[str, ...]
    hooks: tuple[tuple[str, tuple[StepHook, ...]], ...]
    hook_scripts: tuple[HookScript, ...]
    test_type_pipelines: tuple[str, ...]  # pipelines holding test types (not empty though they hold no step)

    @classmethod
    def of(cls, project: Project, test_type_pipelines: Iterable[str]) -> Snapshot:
        kept = {f.name: getattr(project, f.name) for f in dataclasses.fields(project) if f.name not in ("root", "dbt_projects")}
        return cls(**kept, test_type_pipelines=tuple(sorted(test_type_pipelines)))

    def project(self, root: str, dbt_projects: tuple[DbtProject, ...]) -> Project:
        kept = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "test_type_pipelines"}
        return Project(root=root, dbt_projects=dbt_projects, **kept)


@dataclass(frozen=True)
class Key:
    digest: str
    trusted: bool  # every file changed long enough ago for its stat to stand for its content


def key(paths: Iterable[Path], *parts: str) -> Key:
    """The key of a load reading the files ``paths`` (by stat) and made of ``parts`` (the folder, the dbt part's fingerprint, ...)."""
    started = time.time_ns()
    h = hashlib.sha256("\0".join((SNAPSHOT_VERSION, CACHE_VERSION, code_fingerprint(), parser_fingerprint(), *parts, "")).encode())
    newest = 0
    for p in paths:
        st = os.stat(p)
        h.update(f"{p}\0{st.st_size}\0{st.st_ino}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\n".encode())
        newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    return Key(h.hexdigest()[:32], newest < started - TRUST_AFTER_NS)


@functools.cache
def code_fingerprint() -> str:
    """lineage_defs' source files by path, size and mtime: another version plans differently."""
    package = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for folder, dirs, files in sorted(os.walk(package)):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                h.update(f"{folder}/{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:32]


def read(cache_dir: Path | None, k: Key | None) -> Snapshot | None:
    """The snapshot kept under ``k``, or None (none kept, another key, unreadable)."""
    if cache_dir is None or k is None or not k.trusted:
        return None
    try:
        with open(cache_dir / FILE_NAME, "rb") as f:
            # the key first, on a line of its own: the plan of another key is not parsed (the first load after an edit)
            header = json.loads(f.readline())
            if not isinstance(header, dict) or header.get("version") != SNAPSHOT_VERSION or header.get("key") != k.digest:
                return None
            value = decode(json.loads(f.read()), Snapshot)
    except (OSError, ValueError, RecursionError, CodecError):
        return None
    return value if isinstance(value, Snapshot) else None


def write(cache_dir: Path | None, k: Key | None, snapshot: Snapshot) -> None:
    """Keep ``snapshot`` under ``k`` (one per state dir, replaced atomically, ``0600``); never fails the load."""
    if cache_dir is None or k is None or not k.trusted:
        return
    try:
        plan = encode(snapshot, Snapshot)
    except (TypeError, ValueError):
        return
    write_json(cache_dir / FILE_NAME, plan, header={"version": SNAPSHOT_VERSION, "key": k.digest})
