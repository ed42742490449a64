"""Set-based range runs: ``partitioned … time_column=<col> [batch=<n>]`` (SPEC section 4).

A range is cut into batches of up to ``n`` contiguous partitions (default:
the whole range). For each batch the body runs ONCE with ``$partition_start``
/ ``$partition_end`` bound to the batch's window; the staged rows get their
managed ``_partition`` from ``<col>`` — each row lands in the partition
window (as Dagster computed it: keys, time zone and format are Dagster's)
that holds its time — and the batch's partitions are replaced in one
transaction. Data tests run grouped by partition over the staged batch, and
each partition is reported on its own (row count, checks), as a
per-partition run would. A batch commits or rolls back whole.

Rows whose time is NULL or outside the batch's window are refused with a
count and the offending range: they belong to no partition of the batch.

Per-partition objects (``s3://…/{partition}.parquet``) cannot share a
transaction: the whole batch is staged and audited before any object is
published, and then each object is replaced atomically on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from lineage_defs.errors import RunError, did_you_mean
from lineage_defs.plan.spec import PARTITION_COLUMN, ScriptStep, Strategy
from lineage_defs.run.checks import PER_SLICE, CheckFailed, CheckOutcome, evaluate_by_partition
from lineage_defs.run.context import PartitionWindow, bind_params, resolve_token
from lineage_defs.run.engine import SLICE
from lineage_defs.run.sql_step import SliceResult, StepRunner, write_request
from lineage_defs.run.substrates import execute
from lineage_defs.run.write import write
from lineage_defs.run.write.base import WriteRequest, WriteResult
from lineage_defs.settings import LineageSettings
from lineage_defs.uris import PARTITION_TOKEN

BATCH = "__lineage_batch"  # the staged rows with their partition
WINDOWS = "__lineage_windows"  # the batch's partition windows, cast to the time column's type
PART = "__lineage_part"  # one partition's rows (per-partition objects, custom tests)
TIME_TYPES = ("DATE", "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "TIMESTAMP WITH TIME ZONE")


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def batches(windows: list[PartitionWindow], size: int | None) -> list[list[PartitionWindow]]:
    """Contiguous runs of at most ``size`` partitions (a gap in the range starts a new batch).

    >>> import datetime as dt
    >>> day = lambda d: PartitionWindow(f"d{d}", dt.datetime(2024, 1, d), dt.datetime(2024, 1, d + 1))
    >>> [[w.key for w in b] for b in batches([day(1), day(2), day(3), day(5)], 2)]
    [['d1', 'd2'], ['d3'], ['d5']]
    """
    out: list[list[PartitionWindow]] = []
    for w in windows:
        if out and (size is None or len(out[-1]) < size) and out[-1][-1].end == w.start:
            out[-1].append(w)
        else:
            out.append([w])
    return out


def batch_window(batch: list[PartitionWindow]) -> PartitionWindow:
    """The window the body sees: from the first partition's start to the last one's end."""
    key = batch[0].key if len(batch) == 1 else f"{batch[0].key}..{batch[-1].key}"
    return PartitionWindow(key, batch[0].start, batch[-1].end)


class BatchRunner(StepRunner):
    """A step with ``time_column``: one staged SELECT and one write per batch of partitions."""

    batch_windows: list[PartitionWindow] = []

    def unstaged(self, target: str) -> bool:
        return False  # the batch's rows are staged: their partitions are derived from them

    def run_batch(self, batch: list[PartitionWindow]) -> list[SliceResult]:
        """Run one batch; one result per partition (all failed, with the batch's error, if it rolled back)."""
        self.batch_windows = batch
        self.parts: dict[str, SliceResult] = {w.key: SliceResult(w.key, resolve_token(self.step.uri, w)) for w in batch}
        whole = self.run(batch_window(batch))  # the body, staged; then _write below
        share = whole.seconds / len(batch)
        for r in self.parts.values():
            r.sql = r.sql or whole.sql
            r.seconds = share
            if whole.error is not None and r.write is None:
                r.error = r.error or whole.error
        return list(self.parts.values())

    # -- StepRunner calls this with the batch's rows staged in SLICE ----------------------
    def _write(
        self,
        window: PartitionWindow | None,
        result: SliceResult,
        rows: int | None = None,
        query: tuple[str, dict[str, Any]] | None = None,
        columns: tuple[tuple[str, str], ...] | None = None,
    ) -> None:
        conn = self.session.conn
        tc = self._time_column()
        self._derive_partitions(tc, rows)
        conn.execute(f"DROP TABLE IF EXISTS {SLICE}")  # the batch table holds the rows now
        counts = dict(conn.execute(f"SELECT {_q(PARTITION_COLUMN)}, count(*) FROM {BATCH} GROUP BY 1").fetchall())
        keys = [w.key for w in self.batch_windows]
        for k in keys:
            self.parts[k].rows = int(counts.get(k, 0))
        if PARTITION_TOKEN in self.step.uri:
            self._write_objects(result)
        else:
            self._write_together(result, keys, sum(counts.values()))

    def _time_column(self) -> tuple[str, str]:
        """(name, DuckDB type) of the time column in the staged rows, checked."""
        assert self.step.partitioning is not None and self.step.partitioning.time_column
        name = self.step.partitioning.time_column
        cols = [(r[0], r[1]) for r in self.session.conn.execute(f"DESCRIBE {SLICE}").fetchall()]
        types = dict(cols)
        if PARTITION_COLUMN in types:
            raise RunError(
                f"the SELECT returns a column {PARTITION_COLUMN}, which a set-based write derives from {name}",
                fix=f"rename it or SELECT * EXCLUDE ({PARTITION_COLUMN})",
            )
        if name not in types:
            guess = did_you_mean(name, list(types))
            raise RunError(
                f"time_column '{name}' is not a column of the SELECT (columns: {', '.join(types)})",
                fix=f"did you mean '{guess}'?" if guess else f"select the rows' time as {name}, or change time_column=",
            )
        if types[name] not in TIME_TYPES:
            raise RunError(
                f"time_column '{name}' is {types[name]}; a partition is found by comparing times",
                fix=f"cast it in the SELECT, e.g. CAST({name} AS TIMESTAMP) AS {name}",
            )
        return name, types[name]

    def _derive_partitions(self, tc: tuple[str, str], staged: int | None) -> None:
        """BATCH = the staged rows + the partition holding each row's time; refuse rows outside the batch.

        The windows are Dagster's (keys, time zone, format), cast to the time
        column's type exactly as ``$partition_start::<type>`` is in the body.
        A row finds its window by an equality join on 15-minute buckets (every
        time zone's offset is a multiple of 15 minutes, so a window holds whole
        buckets; the bounds are checked all the same), which costs about one
        copy of the rows, where a range or ASOF join would sort them.
        """
        conn = self.session.conn
        name, typ = tc
        col = _q(name)
        as_ts = "TIMESTAMPTZ" if typ == "TIMESTAMP WITH TIME ZONE" else "TIMESTAMP"
        params = [bind_params(w) for w in self.batch_windows]
        # 1. The windows, and the buckets each one covers.
        execute(
            conn,
            f"CREATE OR REPLACE TEMP TABLE {WINDOWS} AS SELECT key, lo, hi, "
            f"unnest(range(time_bucket(INTERVAL 15 MINUTE, CAST(lo AS {as_ts})), CAST(hi AS {as_ts}), INTERVAL 15 MINUTE)) AS bucket "
            f"FROM (SELECT unnest($keys) AS key, CAST(unnest($starts) AS {typ}) AS lo, CAST(unnest($ends) AS {typ}) AS hi)",
            {"keys": [p["partition"] for p in params], "starts": [p["partition_start"] for p in params], "ends": [p["partition_end"] for p in params]},
        )
        # 2. Each row's partition.
        row = conn.execute(
            f"CREATE OR REPLACE TEMP TABLE {BATCH} AS SELECT _s.*, _w.key AS {_q(PARTITION_COLUMN)} FROM {SLICE} AS _s "
            f"JOIN {WINDOWS} AS _w ON _w.bucket = time_bucket(INTERVAL 15 MINUTE, CAST(_s.{col} AS {as_ts})) AND _s.{col} >= _w.lo AND _s.{col} < _w.hi"
        ).fetchone()
        if staged is not None and row is not None and int(row[0]) == staged:
            return
        # 3. Some rows found no partition: say which, and how many.
        keys = {p["partition"] for p in params}
        empty = conn.execute(f"SELECT key FROM {WINDOWS} GROUP BY key HAVING min(lo) >= min(hi) LIMIT 1").fetchone()
        if empty or conn.execute(f"SELECT count(DISTINCT key) FROM {WINDOWS}").fetchone()[0] < len(keys):
            raise RunError(
                f"time_column '{name}' is {typ}: the partitions of {batch_window(self.batch_windows).key} are shorter than one {typ} value",
                fix=f"select {name} as a TIMESTAMP (partitions shorter than a day need one)",
            )
        bad = conn.execute(
            f"SELECT count(*) FILTER (WHERE {col} IS NULL), count(*) FILTER (WHERE {col} < w.lo OR {col} >= w.hi), "
            f"min({col}) FILTER (WHERE {col} < w.lo OR {col} >= w.hi), max({col}) FILTER (WHERE {col} < w.lo OR {col} >= w.hi), "
            f"any_value(w.lo), any_value(w.hi) "
            f"FROM {SLICE}, (SELECT min(lo) AS lo, max(hi) AS hi FROM {WINDOWS}) AS w"
        ).fetchone()
        nulls, outside, first, last, start, end = bad if bad else (0, 0, None, None, None, None)
        what = []
        if outside:
            what.append(f"{outside} row{'s' if outside != 1 else ''} with {name} outside [{start}, {end}) (from {first} to {last})")
        if nulls:
            what.append(f"{nulls} row{'s' if nulls != 1 else ''} with {name} NULL")
        raise RunError(
            f"the batch {batch_window(self.batch_windows).key} has {' and '.join(what) or 'rows in no partition'}: they belong to no partition of the batch",
            fix=f"filter the SELECT on the batch window: WHERE {name} >= $partition_start::{typ} AND {name} < $partition_end::{typ}",
        )

    # -- writing ------------------------------------------------------------------------------
    def _audit(self, keys: list[str]) -> Any:
        """The grouped data tests of the batch (None when the step has none)."""
        if not self.step.tests:
            return None
        windows = {w.key: w for w in self.batch_windows}

        def custom(key: str) -> list[CheckOutcome]:
            conn = self.session.conn
            execute(conn, f"CREATE OR REPLACE TEMP TABLE {PART} AS SELECT * EXCLUDE ({_q(PARTITION_COLUMN)}) FROM {BATCH} WHERE {_q(PARTITION_COLUMN)} = $p", {"p": key})
            tests = tuple(t for t in self.step.tests if t.kind in PER_SLICE)
            try:
                return self._evaluate(conn, windows[key], PART, tests)
            except CheckFailed as e:
                return e.outcomes

        def audit(conn: Any) -> None:
            try:
                got = evaluate_by_partition(conn, self.step.tests, BATCH, PARTITION_COLUMN, keys, self.session.table_sql, custom, self.step.path)
            except CheckFailed as e:
                for k, outcomes in (e.by_partition or {}).items():
                    self.parts[k].checks = outcomes
                raise
            for k, outcomes in got.items():
                self.parts[k].checks = outcomes

        return audit

    def _write_together(self, result: SliceResult, keys: list[str], rows: int) -> None:
        """A table or one object: the batch's partitions replaced in one transaction."""
        req = dataclasses.replace(write_request(self.step, self.step.uri, None), strategy=Strategy.PARTITION_REPLACE, slice_table=BATCH, partitions=tuple(keys), slice_rows=rows)
        wr = write(self.session, req, self._audit(keys))
        self._done(result, wr)
        for r in self.parts.values():
            r.write = wr
        self.record_schema(wr.schema)

    def _write_objects(self, result: SliceResult) -> None:
        """One object per partition: audit the whole batch, then publish each object atomically."""
        audit = self._audit([w.key for w in self.batch_windows])
        if audit is not None:
            audit(self.session.conn)
        conn = self.session.conn
        schema: list[tuple[str, str]] = []
        for w in self.batch_windows:
            r = self.parts[w.key]
            execute(conn, f"CREATE OR REPLACE TEMP TABLE {PART} AS SELECT * EXCLUDE ({_q(PARTITION_COLUMN)}) FROM {BATCH} WHERE {_q(PARTITION_COLUMN)} = $p", {"p": w.key})
            req: WriteRequest = dataclasses.replace(write_request(self.step, r.target, w), slice_table=PART, slice_rows=r.rows)
            try:
                wr = write(self.session, req, None)
            except Exception as e:  # the objects published so far stay published: they are whole
                r.error = e
                for later in self.batch_windows[self.batch_windows.index(w) + 1 :]:
                    self.parts[later.key].error = RunError(f"not written: partition {w.key} of the same batch failed first", fix="re-run the failed partitions")
                raise
            r.write = wr
            r.sql = list(result.sql) + wr.sql
            schema = wr.schema
        result.rows = sum(r.rows or 0 for r in self.parts.values())
        self.record_schema(schema)

    @staticmethod
    def _done(result: SliceResult, wr: WriteResult) -> None:
        result.write = wr
        result.rows = wr.rows
        result.sql.extend(wr.sql)


def run_batches(settings: LineageSettings, step: ScriptStep, windows: list[PartitionWindow]) -> Iterator[SliceResult]:
    """The set-based counterpart of ``run_windows``: one result per partition, in order."""
    assert step.partitioning is not None
    runner = BatchRunner(settings, step)
    try:
        for b in batches(windows, step.partitioning.batch):
            yield from runner.run_batch(b)
    finally:
        runner.close()
