"""Captured schemas, and consumers' column references checked against them.

The reference is the last materialization's ``dagster/column_schema`` in the
Dagster instance: every process (a code server, a run on another machine, a
Celery worker) that reaches the instance compares against the same schema.
Each write also records the target's columns in ``<state>/schemas/``
(``record_schema``): a per-process copy used only where no instance is
reachable (``lineage-defs check`` without ``DAGSTER_HOME``) or for a table the
instance never materialized. At load a step that reads a column its upstream
no longer has gets a warning with ``file:line``. Plain JSON files: nothing in
the state dir is ever unpickled or executed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, SpecError, did_you_mean
from lineage_defs.plan.spec import AnyStep, Project, ScriptStep
from lineage_defs.settings import LineageSettings

INDEX_VERSION = 1
log = logging.getLogger("lineage_defs")


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


@contextmanager
def reference_instance() -> Iterator[Any]:
    """The Dagster instance of ``DAGSTER_HOME`` whose materializations hold the reference schemas
    (None without ``DAGSTER_HOME``: then each process's own captures are the reference)."""
    if not os.environ.get("DAGSTER_HOME"):
        yield None
        return
    from dagster import DagsterInstance

    with DagsterInstance.get() as instance:
        yield instance


def _default_key(uri: str) -> Any:
    from dagster import AssetKey

    return AssetKey(list(uris.key_path(uri)))


def materialized_schemas(instance: Any, wanted: Iterable[str], asset_key: Callable[[str], Any] = _default_key) -> dict[str, list[tuple[str, str]]]:
    """URI → (column, type) pairs of its last materialization in ``instance``, for the URIs of ``wanted``
    whose last materialization has a schema: one query for them all (a code location of thousands of
    assets loads in every run process)."""
    keys = {asset_key(uri): uri for uri in set(wanted)}
    out: dict[str, list[tuple[str, str]]] = {}
    for record in instance.get_asset_records(list(keys)) if keys else ():
        event = record.asset_entry.last_materialization
        materialization = event.asset_materialization if event is not None else None
        value = materialization.metadata.get("dagster/column_schema") if materialization is not None else None
        schema = getattr(value, "schema", None)  # a TableSchemaMetadataValue
        uri = keys.get(record.asset_entry.asset_key)
        if schema is not None and uri is not None:
            out[uri] = [(str(c.name), str(c.type)) for c in schema.columns]
    return out


def captured_schema(settings: LineageSettings, uri: str, instance: Any = None) -> list[tuple[str, str]] | None:
    """One target's captured (column, type) pairs, None when it was never written.

    With an instance, its last materialization's schema; the local capture when
    it has none (or no types: a column typed ``unknown``).
    """
    if instance is not None:
        cols = materialized_schemas(instance, [uri]).get(uri)
        if cols is not None and all(t != "unknown" for _, t in cols):
            return cols
    try:
        data = json.loads((settings.schemas_dir / (hashlib.sha256(uri.encode()).hexdigest()[:24] + ".json")).read_text())
        return [(str(c[0]), str(c[1])) for c in data["columns"]] if data.get("uri") == uri else None
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def captured_schemas(
    settings: LineageSettings, wanted: Iterable[str] = (), instance: Any = None, asset_key: Callable[[str], Any] = _default_key
) -> dict[str, list[str]]:
    """URI → captured column names: for each URI of ``wanted`` the instance materialized, its last
    materialization's columns; this process's local captures for every other URI."""
    out = _local_schemas(settings)
    if instance is not None:
        for uri, cols in materialized_schemas(instance, wanted, asset_key).items():
            out[uri] = [c for c, _ in cols]
    return out


def reference_schemas(settings: LineageSettings, project: Project, asset_key: Callable[[str], Any] = _default_key) -> dict[str, list[str]]:
    """URI → the columns ``project``'s consumers are checked against: the Dagster instance's last
    materializations (every process sees the same), this process's captures where none is reachable."""
    wanted = consumed_uris(project)
    if not wanted:
        return {}
    try:
        with reference_instance() as instance:
            return captured_schemas(settings, wanted, instance, asset_key)
    except Exception as e:  # an unreachable instance must not stop loading or `check`: these are warnings
        log.warning(f"consumer column checks use this process's captured schemas: the Dagster instance could not be read ({e})")
        return captured_schemas(settings)


def consumed_uris(project: Project) -> set[str]:
    """The upstream URIs whose columns some step reads (those ``column_warnings`` looks up)."""
    return {e.source_uri for step in project.steps for e in step.column_edges}


def _local_schemas(settings: LineageSettings) -> dict[str, list[str]]:
    """URI → column names recorded under this process's state dir.

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


def _where(step: AnyStep, column: str, uri: str = "") -> Location:
    if not isinstance(step, ScriptStep):
        return Location(step.path, 1)
    for decl in step.column_decls:  # a declared source: its `column` line
        for src in decl.sources:
            if src.at is not None and src.column == column and src.uri == uri:
                return src.at
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
                    _where(step, e.source_column, e.source_uri),
                    f"did you mean '{guess}'?" if guess else f"its columns are {', '.join(cols)}",
                    severity="warning",
                )
            )
    return out
