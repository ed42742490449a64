"""Data tests on the slice just written (SPEC section 5).

Run as the write's audit: inside the transaction, after the write and before
COMMIT, so a failing ``severity=error`` test rolls the slice back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage_defs.errors import Location, RunError
from lineage_defs.parse.model import DataTest, Language, Severity, TestKind
from lineage_defs.run.quoting import ident
from lineage_defs.run.substrates import execute
from lineage_defs.run.test_types import python_test, sql_test

MAX_SAMPLES = 20
# Tests a set-based batch evaluates on each partition's own slice (the others run grouped over the batch).
PER_SLICE = (TestKind.CUSTOM, TestKind.TYPE)


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool
    severity: str  # warn | error (a Severity, or its value once read back from a result file)
    failing: int  # violating rows (or the count itself for row_count)
    samples: list[dict[str, Any]] = field(default_factory=list)
    sql: str = ""
    description: str = ""


class CheckFailed(RunError):
    """A blocking data test failed; the slice was rolled back."""

    def __init__(self, outcomes: list[CheckOutcome], path: str, by_partition: dict[str, list[CheckOutcome]] | None = None) -> None:
        self.outcomes = outcomes
        self.by_partition = by_partition  # a set-based batch: each partition's outcomes
        if by_partition is not None:
            failed = [(f"{o.name} [{k}]", o) for k, os_ in by_partition.items() for o in os_ if not o.passed and o.severity == Severity.ERROR]
        else:
            failed = [(o.name, o) for o in outcomes if not o.passed and o.severity == Severity.ERROR]
        lines = [f"{name}: {o.failing} failing ({o.description}); samples: {o.samples[:5]}" for name, o in failed[:10]]
        if len(failed) > 10:
            lines.append(f"… and {len(failed) - 10} more")
        super().__init__("data tests failed, the slice was rolled back:\n  " + "\n  ".join(lines), Location(path), "fix the data or the test; the previous contents are unchanged")


def _rows(conn: Any, sql: str, params: dict[str, Any] | None = None) -> tuple[int, list[dict[str, Any]]]:
    cur = execute(conn, f"SELECT count(*) FROM ({sql})", params)
    n = int(cur.fetchone()[0])
    if not n:
        return 0, []
    cur = execute(conn, f"SELECT * FROM ({sql}) LIMIT {MAX_SAMPLES}", params)
    cols = [d[0] for d in cur.description]
    return n, [{c: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for c, v in zip(cols, row)} for row in cur.fetchall()]


def _violations(t: DataTest, table: str, ref_table: Any, by: str | None = None) -> tuple[str, dict[str, Any], str]:
    """(SQL of the violating rows, params, description) of a built-in test on ``table``.

    ``by`` (a batch's partition column) is kept in every row, so the rows can be
    counted per partition; ``unique`` then means unique within each partition.
    """
    col = ident(t.column) if t.column else ""
    if t.kind == TestKind.UNIQUE:
        keys = f"{ident(by)}, {col}" if by else col
        return f"SELECT {keys}, count(*) AS n FROM {table} WHERE {col} IS NOT NULL GROUP BY {keys} HAVING count(*) > 1", {}, f"{t.column} is unique"
    if t.kind == TestKind.NOT_NULL:
        return f"SELECT * FROM {table} WHERE {col} IS NULL", {}, f"{t.column} is not null"
    if t.kind == TestKind.ACCEPTED_VALUES:
        sql = f"SELECT * FROM {table} WHERE {col} IS NOT NULL AND CAST({col} AS VARCHAR) NOT IN (SELECT unnest($accepted))"
        return sql, {"accepted": list(t.values)}, f"{t.column} in {list(t.values)}"
    if t.kind == TestKind.RELATIONSHIPS:
        ref = ref_table(t.ref_uri)
        sql = f"SELECT s.* FROM {table} s WHERE s.{col} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {ref} r WHERE r.{ident(t.ref_column or '')} = s.{col})"
        return sql, {}, f"{t.column} → {t.ref_uri}.{t.ref_column}"
    raise ValueError(t.kind)  # row_count and custom tests are evaluated by the callers


def _row_count(t: DataTest, n: int, table: str) -> CheckOutcome:
    ok = (t.min is None or n >= t.min) and (t.max is None or n <= t.max)
    return CheckOutcome(t.name, ok, t.severity, 0 if ok else n, [], f"SELECT count(*) FROM {table}", f"row count {n} in [{t.min}, {t.max}]")


def evaluate(
    conn: Any,
    tests: tuple[DataTest, ...],
    slice_table: str,
    ref_table: Any,
    custom_sql: Any,
    path: str,
    root: str = ".",
) -> list[CheckOutcome]:
    """Evaluate every test; raise ``CheckFailed`` after all ran if a blocking one failed.

    ``ref_table(uri)`` names a relationships target in this connection;
    ``custom_sql(script)`` returns the compiled (sql, params) of a custom test
    (or of a test type's script); ``root`` is the pipelines folder test types are relative to.
    """
    out = []
    for t in tests:
        if t.kind == TestKind.ROW_COUNT:
            out.append(_row_count(t, int(conn.execute(f"SELECT count(*) FROM {slice_table}").fetchone()[0]), slice_table))
            continue
        if t.kind == TestKind.TYPE and (t.script or "").endswith(".py"):
            try:
                n, desc = python_test(conn, t, root)
            except RunError:
                raise
            except Exception as e:
                raise RunError(f"data test '{t.name}' could not run: {e}", t.at or Location(path), "fix the test type's check() or the arguments it gets") from e
            out.append(CheckOutcome(t.name, n == 0, t.severity, n, [], "", desc))
            continue
        if t.kind == TestKind.CUSTOM:
            sql, params = custom_sql(t.script)
            desc = f"{t.script} returns no rows"
        elif t.kind == TestKind.TYPE:
            sql, params, desc = sql_test(t, root, custom_sql)
        else:
            sql, params, desc = _violations(t, slice_table, ref_table)
        try:
            n, samples = _rows(conn, sql, params)
        except Exception as e:
            raise RunError(f"data test '{t.name}' could not run: {e}", t.at or Location(path), "fix the test or the column it names") from e
        out.append(CheckOutcome(t.name, n == 0, t.severity, n, samples, sql, desc))
    if any(not o.passed and o.severity == Severity.ERROR for o in out):
        raise CheckFailed(out, path)
    return out


def evaluate_by_partition(
    conn: Any,
    tests: tuple[DataTest, ...],
    batch_table: str,
    by: str,
    keys: list[str],
    ref_table: Any,
    custom: Any,
    path: str,
) -> dict[str, list[CheckOutcome]]:
    """The tests of a set-based batch, each partition judged on its own rows (as if written alone).

    Built-in tests run once over the batch, grouped by the partition column
    ``by``; ``custom(key)`` evaluates the custom tests and test types of one partition. Raises
    ``CheckFailed`` (every partition's outcomes) after all ran if a blocking one failed.
    """
    out: dict[str, list[CheckOutcome]] = {k: [] for k in keys}
    for t in tests:
        if t.kind == TestKind.ROW_COUNT:
            counts = dict(conn.execute(f"SELECT {ident(by)}, count(*) FROM {batch_table} GROUP BY 1").fetchall())
            for k in keys:
                out[k].append(_row_count(t, int(counts.get(k, 0)), batch_table))
            continue
        if t.kind in PER_SLICE:
            continue
        sql, params, desc = _violations(t, batch_table, ref_table, by)
        try:
            counts = dict(execute(conn, f"SELECT {ident(by)}, count(*) FROM ({sql}) GROUP BY 1", params).fetchall())
            samples: dict[str, list[dict[str, Any]]] = {}
            if counts:
                cur = execute(conn, f"SELECT * FROM ({sql}) QUALIFY row_number() OVER (PARTITION BY {ident(by)}) <= {MAX_SAMPLES}", params)
                cols = [d[0] for d in cur.description]
                for row in cur.fetchall():
                    rec = {c: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for c, v in zip(cols, row)}
                    samples.setdefault(str(rec.pop(by)), []).append(rec)
        except Exception as e:
            raise RunError(f"data test '{t.name}' could not run: {e}", t.at or Location(path), "fix the test or the column it names") from e
        for k in keys:
            n = int(counts.get(k, 0))
            out[k].append(CheckOutcome(t.name, n == 0, t.severity, n, samples.get(k, []), sql, desc))
    if any(t.kind in PER_SLICE for t in tests):
        for k in keys:
            out[k].extend(custom(k))
    failed = {k: [o for o in os_ if not o.passed and o.severity == Severity.ERROR] for k, os_ in out.items()}
    if any(failed.values()):
        raise CheckFailed([o for os_ in out.values() for o in os_], path, by_partition=out)
    return out


def read_custom(pipelines_dir: str, step_path: str, script: str) -> list[Any]:
    """The statements of a custom test script (relative to the step's folder, then the root)."""
    root = Path(pipelines_dir)
    for cand in (root / Path(step_path).parent / script, root / script):
        if cand.exists():
            return script_statements(cand)
    raise RunError(f"data_test script '{script}' not found", Location(step_path), "the path is relative to the step's folder or the pipelines folder")


def script_statements(path: Path) -> list[Any]:
    """The statements of a DuckDB script after its leading comment block, with file lines."""
    from lineage_defs.parse.header import split_body
    from lineage_defs.plan.sql import split_statements

    body, body_line = split_body(path.read_text(), Language.DUCKDB)
    return list(split_statements(body, "duckdb", body_line))
