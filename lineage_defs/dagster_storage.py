"""Dagster's SQLite event log, made cheap enough for range runs of hundreds of partitions.

A range run reports one materialization (and one planned event) per partition:
730 events for a 365-day backfill. Dagster's own `SqliteEventLogStorage` builds a
new SQLAlchemy engine for every connection it opens (three per asset event: the
run's shard, the index shard twice), so every statement is compiled afresh and
every batch is written event by event. Measured on a 365-partition run that
does nothing else: 7.2 s, as long as the whole plain DuckDB loop the backfill
bench compares against.

This subclass changes only how it writes, not what: the same files, tables and
rows as Dagster's (an instance can switch between the two classes), with

- one engine per shard for the life of the storage object (still `NullPool`: a
  fresh SQLite connection per use, so forked run workers and concurrent
  processes behave as before; the engine keeps SQLAlchemy's compiled-statement
  cache);
- `store_event_batch` writing a batch in one transaction per shard instead of
  one per event, and updating each asset's row once per batch (to the row the
  batch's last events leave; dagster-postgres updates it once per batch too).
  Dagster sends batches when `DAGSTER_EVENT_BATCH_SIZE` is set in the run's
  environment (the Makefile exports it; see docs/configuration.md).

It also holds ``MonitoredRunLauncher``: Dagster's default run launcher, plus
the worker health check Dagster's run monitoring needs to fail a run whose
worker died (a crash of the daemon's process group kills the runs it
launched; without the check such a run stays STARTED forever and nothing
retries it).

The one module of the package that imports Dagster's private modules (its
storage internals and the launcher's health-check types have no public API);
``WRITTEN_FOR`` names the Dagster versions it was written and tested for, and
a test pins the installed one.

Configured in `dagster.yaml`:

    event_log_storage:
      module: lineage_defs.dagster_storage
      class: BatchedSqliteEventLogStorage
      config:
        base_dir: /path/to/storage     # optional: $DAGSTER_HOME/storage
    run_launcher:
      module: lineage_defs.dagster_storage
      class: MonitoredRunLauncher
    run_monitoring:
      enabled: true
      poll_interval_seconds: 10
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher, Field, StringSource
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, EVENT_TYPE_TO_PIPELINE_RUN_STATUS
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.storage.tags import GRPC_INFO_TAG
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SQLITE_BUSY_TIMEOUT_SECONDS, SqliteEventLogStorage
from dagster._core.storage.sqlalchemy_compat import db_result
from dagster._serdes import ConfigurableClassData
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import NullPool

WRITTEN_FOR = ">=1.13,<1.14"  # Dagster versions whose SQLite event log this subclasses


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` with one engine per shard and one transaction per batch."""

    ENGINES = 64

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._engines: dict[str, Engine] = {}
        super().__init__(base_dir, inst_data=inst_data)

    @classmethod
    def config_type(cls) -> Mapping[str, Any]:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]) -> BatchedSqliteEventLogStorage:
        base_dir = config_value.get("base_dir")
        if not base_dir:
            home = os.environ.get("DAGSTER_HOME")
            if not home:
                raise ValueError(
                    "lineage_defs.dagster_storage.BatchedSqliteEventLogStorage: no base_dir in dagster.yaml and "
                    "DAGSTER_HOME is not set — set `base_dir:` under event_log_storage.config"
                )
            base_dir = os.path.join(home, "storage")
        return cls(base_dir, inst_data=inst_data)

    def _engine(self, shard: str) -> Engine:
        """The shard's engine (callers hold `_db_lock`); the least recently used beyond `ENGINES` are dropped."""
        engine = self._engines.pop(shard, None)
        if engine is None:
            engine = create_engine(
                self.conn_string_for_shard(shard), poolclass=NullPool, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS}
            )
            while len(self._engines) >= self.ENGINES:  # a webserver reads many runs' shards over its life
                self._engines.pop(next(iter(self._engines))).dispose()
        self._engines[shard] = engine  # dicts keep insertion order: re-inserted = most recent
        return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():  # NullPool: a fresh SQLite connection each time, as Dagster's
                yield conn

    def dispose(self) -> None:
        super().dispose()
        for engine in self._engines.values():
            engine.dispose()

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """The same rows `store_event` writes for each event, in one transaction per shard."""
        by_run: dict[str, list[EventLogEntry]] = {}
        for event in events:
            by_run.setdefault(event.run_id, []).append(event)
        for run_id, batch in by_run.items():
            inserts = [self.prepare_insert_event(event) for event in batch]
            with self.run_connection(run_id) as conn:
                for insert in inserts:
                    conn.execute(insert)
            typed = [(event, insert, event.dagster_event_type if event.is_dagster_event else None) for event, insert in zip(batch, inserts)]
            assets = [(event, insert) for event, insert, kind in typed if kind in ASSET_EVENTS]
            if assets:
                with self.index_transaction() as conn:
                    ids = []
                    for event, insert in assets:
                        with db_result(conn, insert) as result:
                            ids.append(result.inserted_primary_key[0])
                    self._store_asset_event_tags(conn, [event for event, _ in assets], ids)
                    for i in _last_of_each_kind([event for event, _ in assets]):
                        self._store_asset_event(conn, assets[i][0], ids[i])
            for event, insert, kind in typed:  # not batched by Dagster today; stored as store_event does
                if kind in ASSET_CHECK_EVENTS:
                    with self.index_connection() as conn, db_result(conn, insert) as result:
                        event_id = result.inserted_primary_key[0]
                    self.store_asset_check_event(event, event_id)
                elif kind in EVENT_TYPE_TO_PIPELINE_RUN_STATUS:
                    with self.index_connection() as conn:
                        conn.execute(insert)


def _last_of_each_kind(events: Sequence[EventLogEntry]) -> list[int]:
    """Indexes of the events whose asset-table update survives the batch, in order.

    `_store_asset_event` overwrites the asset's row with columns fixed by the event's
    type (a materialization: the last materialization, run and timestamp; a planned
    event: the run and timestamp): applied in order, only the last event of each type
    per asset decides the row. A range's 365 materializations update it once.
    """
    last: dict[tuple[str, Any], int] = {}
    for i, event in enumerate(events):
        dagster_event = event.dagster_event
        if dagster_event is not None and dagster_event.asset_key is not None:
            last[(dagster_event.asset_key.to_string(), dagster_event.event_type_value)] = i
    return sorted(last.values())


# The run worker's own engine events (dagster/_grpc/impl.py): its pid, and that it ended.
_STARTED = "Started process for run (pid: "
_EXITED = "Process for run exited (pid: "
_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


class MonitoredRunLauncher(DefaultRunLauncher):
    """Dagster's `DefaultRunLauncher` that also tells run monitoring whether a run's worker is alive.

    The worker of a run launched through a code server on this host is a
    process whose pid the run's event log holds ("Started process for run");
    it is alive when a process with that pid exists and started no later than
    that event (a pid reused after a crash belongs to a younger process). A
    run launched elsewhere, or not started yet, is reported running: this
    launcher never fails a run it cannot see.
    """

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        if not _launched_here(run.tags.get(GRPC_INFO_TAG)):
            return CheckRunHealthResult(WorkerStatus.RUNNING, "launched on another host: not checked from here")
        pid, started, exited = None, 0.0, False
        for entry in self._instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT):
            message = entry.message or ""
            if message.startswith(_STARTED):
                pid, started = _pid_of(message), entry.timestamp
            elif message.startswith(_EXITED) and pid is not None and _pid_of(message) == pid:
                exited = True
        if pid is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no worker process recorded yet")
        if exited:
            return CheckRunHealthResult(WorkerStatus.FAILED, f"the run worker (pid {pid}) exited before the run finished")
        if process_alive(pid, started):
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(WorkerStatus.FAILED, f"the run worker (pid {pid}) is gone: its process died (killed or crashed) mid-run")


def _launched_here(grpc_info: str | None) -> bool:
    if not grpc_info:
        return False
    try:
        info = json.loads(grpc_info)
    except ValueError:
        return False
    return "socket" in info or info.get("host") in _LOCAL_HOSTS | {socket.gethostname()}


def _pid_of(message: str) -> int | None:
    digits = message.split("(pid: ", 1)[1].split(")", 1)[0] if "(pid: " in message else ""
    return int(digits) if digits.isdigit() else None


def process_alive(pid: int, not_after: float) -> bool:
    """Whether process ``pid`` runs (a zombie does not) and started no later than ``not_after`` (epoch seconds; 2 s of slack)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, someone else's
    state, started = _proc_stat(pid)
    if state in ("Z", "X"):  # killed, not yet reaped: its parent died with it
        return False
    return started is None or started <= not_after + 2.0


def _proc_stat(pid: int) -> tuple[str | None, float | None]:
    """(state letter, start time in epoch seconds) of process ``pid`` from /proc; Nones where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration, IndexError):
        return None, None
