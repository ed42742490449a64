"""The captured-schema store, and consumers' column references checked against it.

After each write the runtime records the target's columns in
``<state>/schemas/`` (``record_schema``); at load a step that reads a column
its upstream no longer has gets a warning with ``file:line`` (the upstream
may have changed since the consumer was written). Plain JSON files: nothing
in the state dir is ever unpickled or executed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from lineage_defs.errors import Location, SpecError, did_you_mean
from lineage_defs.plan.spec import AnyStep, Project, ScriptStep
from lineage_defs.settings import LineageSettings

INDEX_VERSION = 1


def _write_json(path: Path, data: object) -> None:
    """Replace ``path`` atomically (readers never see half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def record_schema(settings: LineageSettings, uri: str, schema: Sequence[tuple[str, str]]) -> None:
    """Keep a target's captured columns where the next load validates consumers against them."""
    folder = settings.schemas_dir
    _write_json(folder / (hashlib.sha256(uri.encode()).hexdigest()[:24] + ".json"), {"uri": uri, "columns": [list(c) for c in schema]})


def captured_schema(settings: LineageSettings, uri: str) -> list[tuple[str, str]] | None:
    """One target's captured (column, type) pairs, None when it was never written."""
    try:
        data = json.loads((settings.schemas_dir / (hashlib.sha256(uri.encode()).hexdigest()[:24] + ".json")).read_text())
        return [(str(c[0]), str(c[1])) for c in data["columns"]] if data.get("uri") == uri else None
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def captured_schemas(settings: LineageSettings) -> dict[str, list[str]]:
    """URI → captured column names.

    Every run process loads the code location, so the files are read only when
    the folder changed since the last load (the runtime replaces files into
    it, which moves the folder's mtime); otherwise one JSON index is read.
    """
    folder = settings.schemas_dir
    if not folder.is_dir():
        return {}
    stamp = folder.stat().st_mtime_ns
    index = settings.state / "cache" / "schemas-index.json"
    try:
        data = json.loads(index.read_text())
        if data.get("version") == INDEX_VERSION and data.get("stamp") == stamp and isinstance(data.get("schemas"), dict):
            return {str(k): [str(c) for c in v] for k, v in data["schemas"].items()}
    except (OSError, ValueError, AttributeError, TypeError, RecursionError):  # missing or foreign index: read the files
        pass
    out: dict[str, list[str]] = {}
    for p in folder.glob("*.json"):
        try:
            data = json.loads(p.read_text())
            out[str(data["uri"])] = [str(c[0]) for c in data["columns"]]
        except (OSError, ValueError, KeyError, IndexError, TypeError, RecursionError):
            continue  # a partial or foreign file is not a schema
    try:
        _write_json(index, {"version": INDEX_VERSION, "stamp": stamp, "schemas": out})
    except OSError:
        pass
    return out


def _where(step: AnyStep, column: str) -> Location:
    if not isinstance(step, ScriptStep):
        return Location(step.path, 1)
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
