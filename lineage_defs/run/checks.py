"""Data tests on the slice just written (SPEC section 5).

Run as the write's audit: inside the transaction, after the write and before
COMMIT, so a failing ``severity=error`` test rolls the slice back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage_defs.errors import Location, RunError
from lineage_defs.parse.model import DataTest
from lineage_defs.run.quoting import ident

MAX_SAMPLES = 20


@dataclass(frozen=True)
class CheckOutcome:
    name: str
    passed: bool
    severity: str  # warn | error
    failing: int  # violating rows (or the count itself for row_count)
    samples: list[dict[str, Any]] = field(default_factory=list)
    sql: str = ""
    description: str = ""


class CheckFailed(RunError):
    """A blocking data test failed; the slice was rolled back."""

    def __init__(self, outcomes: list[CheckOutcome], path: str) -> None:
        self.outcomes = outcomes
        failed = [o for o in outcomes if not o.passed and o.severity == "error"]
        lines = [f"{o.name}: {o.failing} failing ({o.description}); samples: {o.samples[:5]}" for o in failed]
        super().__init__("data tests failed, the slice was rolled back:\n  " + "\n  ".join(lines), Location(path), "fix the data or the test; the previous contents are unchanged")


def _rows(conn: Any, sql: str, params: dict[str, Any] | None = None) -> tuple[int, list[dict[str, Any]]]:
    cur = conn.execute(f"SELECT count(*) FROM ({sql})", params or None)
    n = int(cur.fetchone()[0])
    if not n:
        return 0, []
    cur = conn.execute(f"SELECT * FROM ({sql}) LIMIT {MAX_SAMPLES}", params or None)
    cols = [d[0] for d in cur.description]
    return n, [{c: (v if isinstance(v, (int, float, str, bool, type(None))) else str(v)) for c, v in zip(cols, row)} for row in cur.fetchall()]


def evaluate(
    conn: Any,
    tests: tuple[DataTest, ...],
    slice_table: str,
    ref_table: Any,
    custom_sql: Any,
    path: str,
) -> list[CheckOutcome]:
    """Evaluate every test; raise ``CheckFailed`` after all ran if a blocking one failed.

    ``ref_table(uri)`` names a relationships target in this connection;
    ``custom_sql(script)`` returns the compiled (sql, params) of a custom test.
    """
    out = []
    for t in tests:
        params: dict[str, Any] = {}
        col = ident(t.column) if t.column else ""
        if t.kind == "unique":
            sql = f"SELECT {col}, count(*) AS n FROM {slice_table} WHERE {col} IS NOT NULL GROUP BY {col} HAVING count(*) > 1"
            desc = f"{t.column} is unique"
        elif t.kind == "not_null":
            sql = f"SELECT * FROM {slice_table} WHERE {col} IS NULL"
            desc = f"{t.column} is not null"
        elif t.kind == "accepted_values":
            sql = f"SELECT * FROM {slice_table} WHERE {col} IS NOT NULL AND CAST({col} AS VARCHAR) NOT IN (SELECT unnest($accepted))"
            params = {"accepted": list(t.values)}
            desc = f"{t.column} in {list(t.values)}"
        elif t.kind == "relationships":
            ref = ref_table(t.ref_uri)
            sql = f"SELECT s.* FROM {slice_table} s WHERE s.{col} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM {ref} r WHERE r.{ident(t.ref_column or '')} = s.{col})"
            desc = f"{t.column} → {t.ref_uri}.{t.ref_column}"
        elif t.kind == "row_count":
            n = int(conn.execute(f"SELECT count(*) FROM {slice_table}").fetchone()[0])
            ok = (t.min is None or n >= t.min) and (t.max is None or n <= t.max)
            out.append(CheckOutcome(t.name, ok, t.severity, 0 if ok else n, [], f"SELECT count(*) FROM {slice_table}", f"row count {n} in [{t.min}, {t.max}]"))
            continue
        else:
            sql, params = custom_sql(t.script)
            desc = f"{t.script} returns no rows"
        try:
            n, samples = _rows(conn, sql, params)
        except Exception as e:
            raise RunError(f"data test '{t.name}' could not run: {e}", t.at or Location(path), "fix the test or the column it names") from e
        out.append(CheckOutcome(t.name, n == 0, t.severity, n, samples, sql, desc))
    if any(not o.passed and o.severity == "error" for o in out):
        raise CheckFailed(out, path)
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

    body, body_line = split_body(path.read_text(), "duckdb")
    return list(split_statements(body, "duckdb", body_line))
