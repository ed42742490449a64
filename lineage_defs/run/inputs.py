"""Inputs that are not there yet: which upstream asset (and partition) to build first.

Asked only after something went wrong or came out empty, so a healthy run
pays nothing: a statement that failed is re-examined for upstream objects
(``s3:///raw/{partition}.csv`` resolved for the partition) and tables that do
not exist; an empty slice for upstream partitioned tables holding no row of
the partition.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, RunError
from lineage_defs.plan.spec import PARTITION_COLUMN, ScriptStep
from lineage_defs.run.context import PartitionWindow, resolve_token
from lineage_defs.run.substrates import execute
from lineage_defs.run.write.context import split_qualified


@dataclass(frozen=True)
class Missing:
    uri: str  # the upstream asset, as the graph names it
    partition: str | None  # the partition of it to build, None when unpartitioned
    what: str  # what is missing, e.g. the resolved object path

    def describe(self) -> str:
        part = f" partition {self.partition}" if self.partition else ""
        return f"{self.uri}{part} ({self.what})"


def _object_exists(session: Any, location: str) -> bool:
    if not location.startswith("s3://"):
        return os.path.exists(location) or any(c in location for c in "*?[")
    try:
        row = execute(session.conn, "SELECT count(*) FROM read_blob($p)", {"p": location}).fetchone()
    except Exception:  # no access at all is not "missing": let the original error speak
        return True
    return bool(row and row[0])


def _table_exists(session: Any, uri: str) -> bool | None:
    """None when the table's catalog is not attached (checking would attach it, maybe take a lock)."""
    u = uris.parse(uri)
    if f"{u.kind}://{u.authority}" not in session.aliases:
        return None
    catalog, schema, table = split_qualified(session.table_sql(uri))
    row = execute(
        session.conn,
        "SELECT count(*) FROM (SELECT database_name, schema_name, table_name AS name FROM duckdb_tables() "
        "UNION ALL SELECT database_name, schema_name, view_name FROM duckdb_views()) "
        "WHERE database_name = $c AND schema_name = $s AND name = $t",
        {"c": catalog, "s": schema, "t": table},
    ).fetchone()
    return bool(row and row[0])


def missing_after_failure(session: Any, step: ScriptStep, window: PartitionWindow | None) -> list[Missing]:
    """Upstream objects and tables of ``step`` that do not exist (after a statement failed)."""
    out: list[Missing] = []
    for dep in step.deps:
        kind = uris.kind_of(dep.uri)
        try:
            if kind is uris.Kind.S3:
                if uris.PARTITION_TOKEN in dep.uri and window is None:
                    continue
                location = session.settings.object_location(resolve_token(dep.uri, window))
                if not _object_exists(session, location):
                    part = window.key if window and uris.PARTITION_TOKEN in dep.uri else None
                    out.append(Missing(dep.uri, part, f"no object at {location}"))
            elif uris.is_table(dep.uri):
                if _table_exists(session, dep.uri) is False:
                    out.append(Missing(dep.uri, None, "the table does not exist"))
        except Exception:  # best effort: never hide the step's own error behind a new one
            continue
    return out


def missing_partitions(session: Any, step: ScriptStep, window: PartitionWindow | None) -> list[Missing]:
    """Upstream partitioned tables holding no row of this partition (after an empty slice)."""
    if window is None:
        return []
    out: list[Missing] = []
    for dep in step.deps:
        if not uris.is_table(dep.uri) or not _table_exists(session, dep.uri):
            continue
        try:
            table = session.table_sql(dep.uri)
            cols = {r[0] for r in session.conn.execute(f"DESCRIBE {table}").fetchall()}
            if PARTITION_COLUMN not in cols:
                continue
            col = '"' + PARTITION_COLUMN + '"'
            row = execute(session.conn, f"SELECT 1 FROM {table} WHERE {col} = $p LIMIT 1", {"p": window.key}).fetchone()
        except Exception:
            continue
        if row is None:
            out.append(Missing(dep.uri, window.key, "no rows of this partition"))
    return out


class InputMissing(RunError):
    """A step failed (or came out empty) because inputs are not built: ``missing`` says which."""

    def __init__(self, missing: list[Missing], location: Location | None, fix: str, said: str = "") -> None:
        self.missing = list(missing)
        self.said = said  # what the engine or the script said, quoted in the fix
        self.checks: list[Any] = []  # the data tests' outcomes, when they failed on the empty slice
        super().__init__(f"input not there yet: {'; '.join(m.describe() for m in missing)}", location, fix)


def not_there_yet(missing: list[Missing], location: Location | None, window: PartitionWindow | None, said: str) -> InputMissing:
    """The error of a step that failed (or came out empty) because ``missing`` inputs are not built:
    which to build first, then what the engine or the script itself said."""
    first = missing[0]
    build = f"{first.uri} partition {first.partition}" if first.partition else first.uri
    err = InputMissing(missing, location, f"materialize {build} first, then re-run{' this partition' if window else ''} ({said[:200]})", said)
    err.__suppress_context__ = True  # the engine's own words are in the fix; its "fix the statement" would mislead
    return err


def build_first(errors: list[BaseException]) -> str | None:
    """What a range run whose partitions failed for missing inputs must build first, input by
    input with its partitions (None when some partition failed for another reason).

    >>> e = InputMissing([Missing("ducklake://main/orders", "2025-02-01", "no rows")], None, "")
    >>> build_first([e, InputMissing([Missing("ducklake://main/orders", "2025-02-02", "no rows")], None, "")])
    'ducklake://main/orders partitions 2025-02-01, 2025-02-02'
    """
    if not errors or not all(isinstance(e, InputMissing) for e in errors):
        return None
    by_uri: dict[str, list[str]] = {}
    for e in errors:
        assert isinstance(e, InputMissing)
        for m in e.missing:
            parts = by_uri.setdefault(m.uri, [])
            if m.partition and m.partition not in parts:
                parts.append(m.partition)
    out = []
    for uri, parts in by_uri.items():
        shown = ", ".join(parts[:10]) + (f" … ({len(parts)} in all)" if len(parts) > 10 else "")
        out.append(f"{uri} partition{'s' if len(parts) > 1 else ''} {shown}" if parts else uri)
    return "; ".join(out)


def missing_after_process(settings: Any, step: ScriptStep, window: PartitionWindow | None) -> list[Missing]:
    """``missing_after_failure`` for a Python or Bash step whose process failed: a session of the
    parent's own (the process has exited, so the state dir's lock is free), never raising."""
    from lineage_defs.run.substrates import Session

    if not step.deps:
        return []
    try:
        with Session(settings) as session:
            return missing_after_failure(session, step, window)
    except Exception:  # best effort: the script's own error is still reported
        return []
