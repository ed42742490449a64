"""Consumers' column references checked against the schemas the runtime captured.

After each write the runtime keeps the target's columns in
``<state>/schemas/``; at load a step that reads a column its upstream no
longer has gets a warning with ``file:line`` (the upstream may have changed
since the consumer was written).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import tempfile
from pathlib import Path

from lineage_defs.errors import Location, SpecError, did_you_mean
from lineage_defs.plan.spec import Project, StepSpec


def captured_schemas(state_dir: str | Path) -> dict[str, list[str]]:
    """URI → captured column names.

    Every run process loads the code location, so the files are read only when
    the folder changed since the last load (the runtime replaces files into
    it, which moves the folder's mtime); otherwise one index pickle is read.
    """
    folder = Path(state_dir) / "schemas"
    if not folder.is_dir():
        return {}
    stamp = folder.stat().st_mtime_ns
    index = Path(state_dir) / "cache" / "schemas-index.pickle"
    try:
        with index.open("rb") as f:
            cached_stamp, cached = pickle.load(f)
        if cached_stamp == stamp and isinstance(cached, dict):
            return cached
    except Exception:  # missing or foreign index: read the files
        pass
    out: dict[str, list[str]] = {}
    for p in folder.glob("*.json"):
        try:
            data = json.loads(p.read_text())
            out[data["uri"]] = [c[0] for c in data["columns"]]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            continue  # a partial or foreign file is not a schema
    try:
        index.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=index.parent, prefix=".schemas-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump((stamp, out), f)
        os.replace(tmp, index)
    except OSError:
        pass
    return out


def _where(step: StepSpec, column: str) -> Location:
    pattern = re.compile(r"\b" + re.escape(column) + r"\b")
    for st in step.statements:
        for i, text in enumerate(st.sql.splitlines()):
            m = pattern.search(text)
            if m:
                return Location(step.path, st.line + i, m.start() + 1, text, len(column))
    return Location(step.path, step.body_line, 1)


def column_warnings(project: Project, schemas: dict[str, list[str]]) -> list[SpecError]:
    """One warning per (step, upstream column) that the upstream's captured schema lacks."""
    out: list[SpecError] = []
    for step in project.steps:
        seen: set[str] = set()
        for e in step.column_edges:
            cols = schemas.get(e.source_uri)
            if cols is None or e.source_column in cols or e.source in seen:
                continue
            seen.add(e.source)
            guess = did_you_mean(e.source_column, cols)
            out.append(
                SpecError(
                    f"{e.source_uri} has no column '{e.source_column}' in its last materialization",
                    _where(step, e.source_column),
                    f"did you mean '{guess}'?" if guess else f"its columns are {', '.join(cols)}",
                    severity="warning",
                )
            )
    return out
