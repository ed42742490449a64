"""Run a SQL step for one or more partitions: setup statements, then the trailing
SELECT staged as the slice, audited and written by the step's strategy.

The statements run on the step's engine (``engine.SqlEngine``), chosen once
by its language: DuckDB steps in-process on a ``Session`` (``duckdb_engine``),
PostgreSQL steps (``.pg.sql``) on the server (``postgres_engine``), whose
trailing SELECT's rows are staged into the session and written like any other
slice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, RunError
from lineage_defs.parse.model import Language, Severity
from lineage_defs.plan.schemas import record_schema
from lineage_defs.plan.spec import ScriptStep, Strategy
from lineage_defs.run import cancel
from lineage_defs.run.checks import CheckFailed, CheckOutcome, evaluate, read_custom, script_statements
from lineage_defs.run.compile import Compiled, compile_statement, uses_substrates
from lineage_defs.run.context import PartitionWindow, resolve_token
from lineage_defs.run.contract import SliceReport
from lineage_defs.run.declared import check_sources, checks_declared, written_audit
from lineage_defs.run.duckdb_engine import DuckDBEngine
from lineage_defs.run.engine import SLICE, SqlEngine, stage_table
from lineage_defs.run.events import RunBatch
from lineage_defs.run.inputs import missing_after_failure, missing_partitions, not_there_yet
from lineage_defs.run.postgres_engine import PostgresEngine
from lineage_defs.run.quoting import ident
from lineage_defs.run.script import checked_step
from lineage_defs.run.substrates import Session
from lineage_defs.run.test_types import SLICE_VIEWS
from lineage_defs.run.write import write
from lineage_defs.run.write.base import WriteRequest, WriteResult
from lineage_defs.settings import LineageSettings

# The engine a step's language runs on (every other language's statements, a Python step's write, are DuckDB's).
ENGINES: dict[Language, type[SqlEngine]] = {Language.POSTGRES: PostgresEngine}


@dataclass
class SliceResult:
    """What happened to one partition (or the whole unpartitioned asset)."""

    partition: str | None
    target: str  # the asset URI written (partition token resolved)
    rows: int | None = None
    write: WriteResult | None = None
    checks: list[CheckOutcome] = field(default_factory=list)
    sql: list[str] = field(default_factory=list)
    error: BaseException | None = None
    seconds: float = 0.0

    def report(self, batch: str | None = None) -> SliceReport:
        """The facts of this slice, as a materialization (or the step's result file) carries them."""
        w = self.write
        return SliceReport(
            target=self.target,
            partition=self.partition,
            rows=self.rows,
            sql=tuple(self.sql),
            schema=tuple((n, t) for n, t in w.schema) if w else None,
            snapshot_id=w.snapshot_id if w else None,
            schema_change=w.schema_change.describe() if w and w.schema_change else None,
            warnings=tuple(w.warnings) if w else (),
            skipped=bool(w and w.skipped),
            seconds=self.seconds,
            checks=tuple(self.checks),
            batch=batch,
        )


def _statements(step: ScriptStep) -> list[tuple[str, int, str]]:
    return [(s.sql, s.line, s.kind) for s in step.statements]


def _temp_objects(conn: Any) -> set[tuple[str, str]]:
    rows = conn.execute("SELECT 'TABLE', table_name FROM duckdb_tables() WHERE temporary UNION ALL SELECT 'VIEW', view_name FROM duckdb_views() WHERE temporary").fetchall()
    return {(k, n) for k, n in rows}


def valid_at(window: PartitionWindow | None) -> str:
    """When an scd2 version starts: the partition's start, else now (UTC)."""
    if window and window.start:
        return window.start.isoformat()
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def write_request(step: ScriptStep, target: str, window: PartitionWindow | None) -> WriteRequest:
    m = step.materialize
    assert m is not None
    strategy = step.strategy
    if strategy == Strategy.PARTITION_REPLACE and target != step.uri:
        strategy = Strategy.REPLACE  # one object per partition: replacing it is replacing the slice
    return WriteRequest(
        uri=target,
        strategy=strategy,
        slice_table=SLICE,
        partition=window.key if window else None,
        key=m.key,
        track=m.track,
        updated_at=m.updated_at,
        deletes=m.deletes,
        on_schema_change=m.on_schema_change,
        valid_at=valid_at(window),
    )


def unused_defaults(step: ScriptStep, code_may_name_any: bool = True) -> frozenset[str]:
    """Default substrates the step never names: not attached, so not locked.

    A step on a PostgreSQL-catalog lake, PostgreSQL or S3 then runs beside
    others instead of queueing on the embedded files' lock (and a worker
    keeps no warehouse file). A Python step's code is not read: it may name
    either, unless ``code_may_name_any`` is off (``runtime.write`` alone:
    ``runtime.connect`` attaches the rest when the code asks for it).
    """
    uris_used = [*step.outputs, *(d.uri for d in step.deps)]
    text = " ".join(s.sql for s in step.statements) + " " + " ".join(step.uses)
    skip = set()
    for alias, substrate in uris.DEFAULT_CATALOGS.items():
        named = any(u.startswith(substrate + "/") for u in uris_used) or re.search(rf"\b{alias}\b", text, re.IGNORECASE)
        if not named and (step.language != Language.PYTHON or not code_may_name_any):
            skip.add(substrate)
    if step.uses or step.tests:
        skip.clear()  # macro libraries and data tests may name either
    return frozenset(skip)


class StepRunner:
    """One step, one session, any number of partitions (each its own transaction)."""

    def __init__(self, settings: LineageSettings, step: ScriptStep, session: Session | None = None, batch: RunBatch | None = None) -> None:
        self.settings = settings
        step = checked_step(settings, step)  # the statements of the script file it was planned from, never the cache's
        self.step = step
        self.batch = batch  # a triggered run's events: `_events`, and the id the write records
        engine = ENGINES.get(step.language, DuckDBEngine)
        own = uses_substrates([s for s, _, _ in _statements(step)], engine.language)
        self.owns_session = session is None
        self.session = session or Session(settings, skip=frozenset(own) | unused_defaults(step))
        self.engine: SqlEngine = engine(settings, step, self.session)
        # state kept across the partitions of one range, declared here rather than found by getattr
        self.staged_rows: int | None = None  # rows of the Arrow table ``stage_arrow`` staged (runtime.write)
        self._select_columns: dict[str, tuple[tuple[str, str], ...]] = {}  # the range's SELECT → its bound columns
        self._recorded: list[tuple[str, str]] | None = None  # the target schema this range recorded last
        try:
            self._prepare()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.engine.close()
        if self.owns_session:
            self.session.close()

    def __enter__(self) -> StepRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- setup shared by all partitions ------------------------------------
    def _prepare(self) -> None:
        conn = self.session.conn
        for catalog, file in self.step.attach:  # a dbt project's own DuckDB database this script reads
            self.session.attach_file(file, catalog, Location(self.step.path))
        macros = DuckDBEngine(self.settings, self.step, self.session)  # macro libraries are DuckDB's, whatever the step's engine
        for lib in self.step.uses:
            for st in script_statements(Path(self.settings.pipelines_dir) / lib):
                macros.execute(compile_statement(st.sql, "duckdb", None, self.session.object_path, macro=True), Location(lib, st.line))
        self.session.use_warehouse()
        triggered = self.batch is not None or bool(self.step.events)
        self.engine.open((self.batch.events if self.batch else ()) if triggered else None)
        # Only scripts that create objects in setup statements need them dropped
        # between partitions (a catalog query per partition otherwise).
        self.needs_reset = any(k not in ("query", "set", "attach", "use") for _, _, k in _statements(self.step)[:-1])
        self.base_temps = _temp_objects(conn) if self.needs_reset else set()

    def _reset(self) -> None:
        """Drop temp objects the previous partition's setup statements created."""
        if not self.needs_reset:
            return
        conn = self.session.conn
        for kind, name in _temp_objects(conn) - self.base_temps:
            conn.execute(f"DROP {kind} IF EXISTS temp.main.{ident(name)}")

    # -- one partition ------------------------------------------------------
    def run(self, window: PartitionWindow | None) -> SliceResult:
        import time

        t0 = time.perf_counter()
        target = resolve_token(self.step.uri, window)
        result = SliceResult(window.key if window else None, target)
        with cancel.watching():  # (within a Dagster step, the step's own watch: assets.execute)
            try:
                self._reset()
                self._run_statements(window, result)
            except BaseException as e:  # reported per partition; the caller decides whether to go on
                stop = cancel.interruption_of(e)
                if stop is not None:  # a cancelled run stops here, not at the next partition
                    result.error = e
                    self.engine.rollback()
                    raise stop
                err: BaseException = e
                if isinstance(e, RunError) and e.location is None and self.step.statements:
                    # a write-layer error (duplicate keys, schema change …): name the
                    # script and its trailing SELECT, whose rows were being written
                    err = RunError(e.message, self._where(self.step.statements[-1].line), e.fix)
                    err.__cause__ = e
                result.error = self._explain(err, window)
                self.engine.rollback()
        result.seconds = time.perf_counter() - t0
        return result

    def _explain(self, e: BaseException, window: PartitionWindow | None) -> BaseException:
        """A failed statement (or a data test, e.g. `relationships` to a table not built yet) whose
        input is not there yet: say which upstream to build first."""
        if not (isinstance(e, RunError) and (e.message.startswith("statement failed") or (e.message.startswith("data test '") and " could not run: " in e.message))):
            return e
        missing = missing_after_failure(self.session, self.step, window)
        if not missing:
            return e
        said = str(e.message).splitlines()[0]
        said = said.removeprefix("statement failed: ")  # a data test's failure keeps the test's name
        return not_there_yet(missing, e.location, window, f"engine said: {said}")

    def _compiled(self, window: PartitionWindow | None) -> list[tuple[Compiled, int, str]]:
        dialect, paramstyle = self.engine.language.value, self.engine.paramstyle
        out = []
        for sql, line, kind in _statements(self.step):
            try:
                out.append((compile_statement(sql, dialect, window, self.session.object_path, paramstyle=paramstyle), line, kind))
            except RunError as e:
                if e.location is not None:
                    raise
                raise RunError(e.message, self._where(line), e.fix) from e
        return out

    def _where(self, line: int) -> Location:
        """The statement starting at ``line``, quoted in the error as the user wrote it."""
        text = next((s for s, n, _ in _statements(self.step) if n == line), "")
        first = next((t for t in text.splitlines() if t.strip()), "")
        return Location(self.step.path, line, 1, first, len(first.rstrip()) or 1)

    def _run_statements(self, window: PartitionWindow | None, result: SliceResult) -> None:
        compiled = self._compiled(window)
        managed = self.step.strategy != Strategy.MANUAL
        body = compiled[:-1] if managed else compiled
        for c, line, _ in body:
            self.engine.execute(c, self._where(line))
            if c.sql:
                result.sql.append(c.sql)
        if not managed:
            self.engine.commit()
            self._manual_checks(window, result)
            return
        last, line, _ = compiled[-1]
        if self.engine.in_session and self.unstaged(result.target):
            # Nothing audits the slice and the strategy reads it once: its INSERT runs
            # the SELECT itself (no staging copy).
            select = last.sql.rstrip().rstrip(";")
            self._write(window, result, None, (f"({select})", last.params), self._columns(select, last.params, line))
            return
        self._write(window, result, self.engine.stage(last, self._where(line), result.sql))

    def _columns(self, select: str, params: dict[str, Any], line: int) -> tuple[tuple[str, str], ...]:
        """The SELECT's columns, bound once per range (binding a lake scan reads its catalog).

        Bound again for each partition when the SELECT reads objects (their
        schema may differ per partition) or the setup statements change objects.
        """
        key = select if not self.needs_reset and not any(k.startswith("__lineage_") for k in params) else None
        cached = self._select_columns
        if key is None or key not in cached:
            cur = self.session.execute(f"SELECT * FROM ({select}) LIMIT 0", params, self._where(line))
            cols = tuple((d[0], str(d[1])) for d in cur.description)
            if key is None:
                return cols
            self._select_columns = {key: cols}
            return cols
        return cached[key]

    def unstaged(self, target: str) -> bool:
        """Whether the write can read the SELECT directly (see ``WriteRequest.slice_params``)."""
        return (
            not self.step.tests
            and self.step.strategy in (Strategy.REPLACE, Strategy.PARTITION_REPLACE, Strategy.APPEND)
            and uris.is_table(target)
        )

    def stage_arrow(self, table: Any) -> None:
        self.staged_rows = int(table.num_rows)
        stage_table(self.session.conn, table)

    def write_slice(self, window: PartitionWindow | None) -> SliceResult:
        """Write the staged slice (the Python helper's path): audit, write, report."""
        result = SliceResult(window.key if window else None, resolve_token(self.step.uri, window))
        self._write(window, result, self.staged_rows)
        return result

    def _write(
        self,
        window: PartitionWindow | None,
        result: SliceResult,
        rows: int | None = None,
        query: tuple[str, dict[str, Any]] | None = None,
        columns: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        req = dataclasses.replace(write_request(self.step, result.target, window), slice_rows=rows, batch=self.batch.id if self.batch else None)
        if query is not None:
            req = dataclasses.replace(req, slice_table=query[0], slice_params=query[1], slice_columns=columns)
        outcomes: list[CheckOutcome] = []
        declared = written_audit(self.session, self.step, result.target) if checks_declared(self.step) else None
        if declared is not None:
            check_sources(self.session, self.step)

        def tests(conn: Any) -> None:
            if self.step.tests:
                outcomes.extend(self._evaluate(conn, window, SLICE))

        def audit(conn: Any) -> None:
            if declared is not None:  # a declared column the write lacks rolls it back (run.declared)
                declared(conn)
            tests(conn)

        try:
            wr = write(self.session, req, audit if self.step.tests or declared is not None else None)
            if wr.skipped:
                tests(self.session.conn)  # the batch is already in: its checks still report, on the same slice
        except CheckFailed as e:
            result.checks = e.outcomes
            missing = missing_partitions(self.session, self.step, window) if rows == 0 and window is not None else []
            if missing:  # the tests failed on an empty slice because an upstream partition is empty
                failed = "; ".join(f"{o.name}: {o.failing} failing" for o in e.outcomes if not o.passed and o.severity == Severity.ERROR)
                where = self._where(self.step.statements[-1].line) if self.step.statements else Location(self.step.path)
                err = not_there_yet(missing, where, window, f"the slice came out empty and the data tests failed: {failed}")
                err.checks = list(e.outcomes)
                raise err from None
            raise
        result.write = wr
        result.rows = wr.rows
        result.sql.extend(wr.sql)
        result.checks = outcomes
        if wr.skipped:
            return  # this trigger batch was written before: nothing new to check or record
        if wr.rows == 0 and window is not None:
            for m in missing_partitions(self.session, self.step, window):
                wr.warnings.append(f"wrote an empty partition: upstream {m.describe()} — materialize {m.uri} partition {m.partition} first, then re-run this one")
        self.record_schema(wr.schema)

    def record_schema(self, schema: list[tuple[str, str]]) -> None:
        """Capture the target's schema once per range unless a partition changed it."""
        if self._recorded != schema:
            record_schema(self.settings, self.step.uri, schema)
            self._recorded = list(schema)

    def _evaluate(self, conn: Any, window: PartitionWindow | None, slice_table: str, tests: tuple[Any, ...] | None = None) -> list[CheckOutcome]:
        def custom(script: str) -> tuple[str, dict[str, Any]]:
            stmts = read_custom(self.settings.pipelines_dir, self.step.path, script)
            if not stmts:
                raise RunError(f"data_test script '{script}' is empty", Location(self.step.path), "write a SELECT returning the violating rows")
            c = compile_statement(stmts[-1].sql.rstrip().rstrip(";"), "duckdb", window, self.session.object_path)
            return c.sql, c.params

        for view in SLICE_VIEWS:
            conn.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM {slice_table}")
        return evaluate(conn, self.step.tests if tests is None else tests, slice_table, self.session.table_sql, custom, self.step.path, self.settings.pipelines_dir)

    def _manual_checks(self, window: PartitionWindow | None, result: SliceResult) -> None:
        """A manual step wrote its target itself: test the target afterwards (no rollback possible)."""
        if not self.step.tests:
            return
        target = self.session.table_sql(result.target) if uris.kind_of(result.target) != uris.Kind.S3 else None
        if target is None:
            return
        try:
            result.checks = self._evaluate(self.session.conn, window, target)
        except CheckFailed as e:
            result.checks = e.outcomes
            raise

