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
retries it), and ``dead_worker``, the same check for the event sensors on an
instance without run monitoring (a fresh ``DAGSTER_HOME`` with no
``dagster.yaml``): they fail such a run of a batch themselves and run the
batch again.

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

import importlib
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterRun, DefaultRunLauncher, Field, StringSource
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, EVENT_TYPE_TO_PIPELINE_RUN_STATUS
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus
from dagster._core.remote_origin import GrpcServerCodeLocationOrigin, ManagedGrpcPythonEnvCodeLocationOrigin
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

    def launch_run(self, context: Any) -> None:
        clock = launch_clock()
        if clock is not None:
            self._instance.add_run_tags(context.dagster_run.run_id, {CLOCK_TAG: clock})
        super().launch_run(context)

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        if not _launched_here(run.tags.get(GRPC_INFO_TAG)):
            return CheckRunHealthResult(WorkerStatus.RUNNING, "launched on another host: not checked from here")
        worker = _worker(self._instance, run.run_id)
        if worker is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no worker process recorded yet")
        gone = _gone(*worker, clock=run.tags.get(CLOCK_TAG))
        return CheckRunHealthResult(WorkerStatus.FAILED, gone) if gone else CheckRunHealthResult(WorkerStatus.RUNNING)


def _worker(instance: Any, run_id: str) -> tuple[int, float, bool] | None:
    """(pid, when it said it started, whether it said it exited) of the run's latest worker process; None before one started."""
    pid, started, exited = None, 0.0, False
    for entry in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        message = entry.message or ""
        if message.startswith(_STARTED):
            pid, started, exited = _pid_of(message), entry.timestamp, False
        elif message.startswith(_EXITED) and pid is not None and _pid_of(message) == pid:
            exited = True
    return None if pid is None else (pid, started, exited)


def _gone(pid: int, started: float, exited: bool, clock: str | None = None) -> str | None:
    """Why the worker ``pid`` (which said it started at ``started``) no longer runs the run; None while
    it does. ``clock``: the run's ``CLOCK_TAG``, the frame its worker's start is read in."""
    if exited:
        return f"the run worker (pid {pid}) exited before the run finished"
    why = _not_running(pid, started, _offset(clock))
    return None if why is None else f"the run worker (pid {pid}) is gone: {why}"


# -- the same check without run monitoring ---------------------------------------------------
# A plain instance (no dagster.yaml: DefaultRunLauncher, run monitoring off) never fails a run whose
# worker died; the event sensors ask ``dead_worker`` about their batches' runs instead.


def unwatched(instance: Any) -> frozenset[str]:
    """The statuses (``STARTED``, ``STARTING``) of runs whose dead worker nothing in ``instance`` would notice,
    among those ``dead_worker`` can judge: none unless the instance's launcher is Dagster's default (its
    workers are processes of a code server, on this host when the run's code location is); ``STARTED``
    unless run monitoring is on and the launcher checks workers; ``STARTING`` unless run monitoring is on
    (it fails a run that takes longer than ``start_timeout_seconds`` to start)."""
    if not _default_launcher(instance):
        return frozenset()
    monitored = bool(getattr(instance, "run_monitoring_enabled", False))
    out = set()
    if not (monitored and _checks_workers(instance)):
        out.add("STARTED")
    if not monitored:
        out.add("STARTING")
    return frozenset(out)


def dead_worker(instance: Any, run: DagsterRun, now: float) -> str | None:
    """Why run ``run`` (STARTED or STARTING, launched by Dagster's default launcher) provably has no worker
    left; None when it may still have one.

    Provably: the worker process it recorded (from this host) exited or is gone — checked before
    the run's status is read again, so a worker that finished in between is not taken for dead; or
    the run has been STARTING for longer than ``run_monitoring.start_timeout_seconds`` (Dagster's
    own bound, default 180 s) without any worker recorded: its launch died (with the daemon) or
    never got anywhere. A run launched on another host, or one whose worker lives, is never dead.
    """
    status = run.status.value
    if status not in ("STARTED", "STARTING"):
        return None
    worker = _worker(instance, run.run_id)
    if worker is not None:
        # where the launcher says it reached the code server; before it could say (the daemon died
        # mid-launch), where the run's code location is served
        here = _launched_here(run.tags[GRPC_INFO_TAG]) if GRPC_INFO_TAG in run.tags else _local_origin(run)
        if not here:
            return None
        gone = _gone(*worker, clock=run.tags.get(CLOCK_TAG))
    elif status == "STARTING":
        launched = instance.get_run_stats(run.run_id).launch_time
        limit = float(instance.run_monitoring_start_timeout_seconds)
        gone = None if launched is None or now - launched < limit else (
            f"it has been STARTING for {now - launched:.0f} s (over run_monitoring.start_timeout_seconds, {limit:g} s) "
            "and no run worker ever started: its launch died with the process launching it"
        )
    else:
        return None  # STARTED with no worker of a code server's: executed some other way, nothing to check
    if gone is None:
        return None
    latest = instance.get_run_by_id(run.run_id)  # read after the worker was found dead: nothing can change it now
    return gone if latest is not None and latest.status.value == status else None


# What a dagster.yaml needs so that Dagster itself fails a run whose worker died, and retries it.
MONITORING_YAML = "run_monitoring: {enabled: true}` and `run_retries: {enabled: true}"


def blind_spot(instance: Any) -> str | None:
    """Why nothing in ``instance`` would notice a batch run whose worker died (neither run monitoring nor
    ``dead_worker``, which judges only runs of Dagster's default launcher), with the setting that fixes
    it; None when something does."""
    if _default_launcher(instance):
        return None
    where = "$DAGSTER_HOME/dagster.yaml"
    if not getattr(instance, "run_monitoring_enabled", False):
        return (
            f"run monitoring is off in this instance and its run launcher is not Dagster's default (whose runs the sensor "
            f"checks itself): a batch run whose worker dies stays in progress and its batch waits — add `{MONITORING_YAML}` to {where}"
        )
    if not _checks_workers(instance):
        data = instance.get_ref().run_launcher_data
        return (
            f"this instance's run launcher ({data.module_name}.{data.class_name}) cannot tell run monitoring whether a run's "
            "worker lives: a batch run whose worker dies stays STARTED and its batch waits — use a launcher with a worker "
            f"health check (Dagster's Kubernetes, ECS and Docker launchers have one) in {where}"
        )
    return None


def _default_launcher(instance: Any) -> bool:
    """Whether the instance's run launcher is Dagster's `DefaultRunLauncher` (or a subclass), without making one."""
    try:
        data = instance.get_ref().run_launcher_data
    except Exception:  # noqa: BLE001 - an instance without a ref (in-process tests): its launcher, if any, as made
        return isinstance(getattr(instance, "_run_launcher", None), DefaultRunLauncher)
    if data is None:
        return False
    if (data.module_name, data.class_name) in (("dagster", "DefaultRunLauncher"), (__name__, "MonitoredRunLauncher")):
        return True
    try:
        cls = getattr(importlib.import_module(data.module_name), data.class_name)
    except (ImportError, AttributeError):
        return False
    return isinstance(cls, type) and issubclass(cls, DefaultRunLauncher)


def _checks_workers(instance: Any) -> bool:
    try:
        return bool(instance.run_launcher.supports_check_run_worker_health)
    except Exception:  # noqa: BLE001 - a launcher that cannot be made here checks nothing here
        return False


def _local_origin(run: DagsterRun) -> bool:
    """Whether the run's code location is served on this host (a server the daemon started, or one at a local address)."""
    origin = run.remote_job_origin
    location = origin.repository_origin.code_location_origin if origin is not None else None
    if isinstance(location, ManagedGrpcPythonEnvCodeLocationOrigin):
        return True
    if isinstance(location, GrpcServerCodeLocationOrigin):
        return bool(location.socket) or location.host in _LOCAL_HOSTS | {socket.gethostname()}
    return False


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


def process_alive(pid: int, not_after: float, offset: float | None = None) -> bool:
    """Whether process ``pid`` runs (a zombie does not) and started no later than ``not_after`` (epoch
    seconds; 2 s of slack). ``offset``: see ``_not_running``."""
    return _not_running(pid, not_after, offset) is None


def _not_running(pid: int, not_after: float, offset: float | None) -> str | None:
    """Why no process ``pid`` that started by ``not_after`` runs; None when one does.

    A process' start is read from /proc in seconds since boot and turned into epoch seconds with
    ``offset`` (the wall clock minus the time since boot, as it was when ``not_after`` was read; see
    ``launch_clock``), or, without one, with the kernel's boot time now — which moves by as much as
    the wall clock is stepped (a VM's clock set right after a pause): stepped forward past the slack,
    a worker that lives looks younger than its own start."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "its process died (killed or crashed) mid-run"
    except PermissionError:
        pass  # exists, someone else's
    state, since_boot = _proc_stat(pid)
    if state in ("Z", "X"):  # killed, not yet reaped: its parent died with it
        return "its process died (killed or crashed) mid-run and is a zombie nobody has reaped"
    if since_boot is None:
        return None
    started = since_boot + (offset if offset is not None else _boot_time())
    if started <= not_after + 2.0:
        return None
    return (f"its process died mid-run: pid {pid} now belongs to a process that started {started - not_after:.1f} s "
            "after the worker's own start event (the pid was reused)")


def _proc_stat(pid: int) -> tuple[str | None, float | None]:
    """(state letter, start time in seconds since boot) of process ``pid`` from /proc; Nones where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None, None


def _boot_time() -> float:
    """The kernel's boot time now, in epoch seconds (whole ones)."""
    return float(next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")))


# The clock a run's worker is judged by: "<boot id> <wall clock minus seconds since boot>", taken on
# the host and at the moment the run is launched, seconds before its worker writes its start event.
CLOCK_TAG = "lineage/launch_clock"
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def launch_clock() -> str | None:
    """The value of ``CLOCK_TAG`` here and now; None where there is no /proc."""
    try:
        boot = _BOOT_ID.read_text().strip()
    except OSError:
        return None
    return f"{boot} {time.time() - time.clock_gettime(time.CLOCK_BOOTTIME):.3f}"


def _offset(clock: str | None) -> float | None:
    """The wall-clock offset of ``clock`` (a ``CLOCK_TAG`` value) when it was taken on this boot of this host; else None."""
    boot, _, offset = (clock or "").partition(" ")
    try:
        return float(offset) if boot and boot == _BOOT_ID.read_text().strip() else None
    except (OSError, ValueError):
        return None
