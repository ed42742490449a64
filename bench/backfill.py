"""Backfill benchmark: 365 daily partitions of a managed DuckLake step as ONE range run.

    .venv/bin/python bench/backfill.py [--days 365] [--rows 10000] [--skip-dbt] [--skip-postgres]
    .venv/bin/python bench/backfill.py --celery [--days 365] [--rows 10000] [--celery-runs 12] [--celery-drivers 2]

Every contender writes the same rows (about --rows per day) from the same raw
DuckLake table into a DuckLake table:
- plain DuckDB: a Python loop running the same INSERT ... SELECT per day;
- dbt-duckdb: an incremental `microbatch` model (batch_size=day) built with
  `dbt run --event-time-start/--event-time-end` over the same days;
- Dagster's floor: a no-op asset reporting the same partitions in one range run;
- lineage_defs per-partition: the step below through Dagster as one run over the
  range (BackfillPolicy.single_run), one transaction and one materialization per
  partition;
- lineage_defs set-based: the same step with `time_column=event_ts`: the body runs
  once for the range, one transaction, still one materialization per partition.
The Dagster contenders run on Dagster's stock SQLite storage, on the embedded
default as shipped (the same SQLite files through lineage_defs.dagster_storage,
with DAGSTER_EVENT_BATCH_SIZE as `make demo` sets it) and on
Dagster-on-PostgreSQL storage (dagster-postgres, a throwaway cluster this bench
starts, with DAGSTER_EVENT_BATCH_SIZE so a range's materializations are stored
in one INSERT); set-based also with DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS
(one planned event per range instead of one per partition; Dagster's trade-off:
the partitions of a failed run are then not marked failed). Prints seconds, ratios against the targets, and the
per-partition overhead over the plain insert net of Dagster's floor; then the
run layer alone (no Dagster), interleaved partition by partition with the
plain INSERT in one process, which machine noise cannot skew.

`--celery` runs only the scale-out figure (docs/deploy.md's setup on one machine):
the same step and days with Dagster and the DuckLake catalog on PostgreSQL, the
data on an S3 server (moto), steps on 1 and then 2 Celery workers (redis-server
broker), each process with its own state dir. A range run is one step, so the
range is cut into --celery-runs range runs submitted by --celery-drivers
processes at once. Figures, not targets: every process shares this machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

STEP = """\
-- Events of one day with the amount in cents.
-- pipeline
-- partitioned daily start={start}
-- materialize ducklake://main/events_daily
SELECT event_id, user_id, amount, CAST(amount * 100 AS BIGINT) AS amount_cents, event_ts
FROM lake.main.raw_events
WHERE event_ts >= $partition_start::TIMESTAMP AND event_ts < $partition_end::TIMESTAMP
"""

PLAIN_SELECT = """
SELECT event_id, user_id, amount, CAST(amount * 100 AS BIGINT) AS amount_cents, event_ts
FROM lake.main.raw_events
WHERE event_ts >= $start::TIMESTAMP AND event_ts < $end::TIMESTAMP
"""


def connect(state: Path, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from lineage_defs.settings import LineageSettings
    from lineage_defs.run.substrates import Session

    if env:  # a lake named by the environment (DuckLake on PostgreSQL, data on S3)
        return Session(LineageSettings.from_env({**env, "LINEAGE_STATE_DIR": str(state)}), skip=frozenset({"duckdb://warehouse"}))
    return Session(LineageSettings(state_dir=str(state)))


def make_raw(state: Path, start: dt.date, days: int, rows: int, env: dict[str, str] | None = None) -> None:
    with connect(state, env) as s:
        s.conn.execute(
            f"""CREATE TABLE lake.main.raw_events AS
            SELECT i AS event_id, (i * 7919) % 100000 AS user_id, round(((i * 31) % 10000) / 100.0, 2) AS amount,
                   TIMESTAMP '{start.isoformat()}' + to_microseconds(CAST((i * 86400000000) // {rows} AS BIGINT)) AS event_ts
            FROM range({days * rows}) t(i)"""
        )


SET_BASED = " time_column=event_ts"


# Dagster storages compared: (name, kind, extra environment of the run process)
BATCH = {"DAGSTER_EVENT_BATCH_SIZE": "1000"}  # a range's events stored as one batch (`make demo` sets it)
STORAGES = (
    # Dagster's stock SQLite event log: an engine and a transaction per event
    ("sqlite, Dagster's stock", "sqlite-stock", {}),
    # the embedded default as shipped (dagster_home/dagster.yaml): the same SQLite files through
    # lineage_defs.dagster_storage — one engine per shard, one transaction per batch
    ("sqlite, embedded default", "sqlite", BATCH),
    # dagster-postgres stores a batch of materializations (a range's) in one INSERT
    ("postgres", "postgres", BATCH),
    # and one planned event for the range instead of one per partition — Dagster's
    # own trade-off: partitions of a failed run are then not marked failed
    ("postgres, 1 planned event", "postgres", {**BATCH, "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS": "1"}),
)
EMBEDDED_EVENT_LOG = {"module": "lineage_defs.dagster_storage", "class": "BatchedSqliteEventLogStorage", "config": {}}


def instance_overrides(kind: str, postgres_url: str | None = None) -> str:
    """Python source for instance_for_test's overrides for a storage kind."""
    if kind == "postgres":
        return repr({"storage": {"postgres": {"postgres_url": postgres_url}}})
    if kind == "sqlite":
        return repr({"event_log_storage": EMBEDDED_EVENT_LOG})
    return "None"


def bench_ours(state: Path, root: Path, start: dt.date, days: int, overrides: str, env: dict[str, str]) -> float:
    code = textwrap.dedent(
        f"""
        import time, dagster as dg
        from dagster._core.storage.tags import ASSET_PARTITION_RANGE_START_TAG as S, ASSET_PARTITION_RANGE_END_TAG as E
        from lineage_defs import build_definitions, LineageSettings
        defs = build_definitions({str(root)!r}, settings=LineageSettings(state_dir={str(state)!r}))
        first, last = {start.isoformat()!r}, {(start + dt.timedelta(days=days - 1)).isoformat()!r}
        with dg.instance_for_test(overrides={overrides}) as inst:
            t = time.perf_counter()
            r = dg.materialize(defs.assets, instance=inst, resources=defs.resources, tags={{S: first, E: last}})
            el = time.perf_counter() - t
            mats = [e for e in r.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
            assert r.success and len(mats) == {days}, (r.success, len(mats))
        print(el)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode:
        raise SystemExit(out.stderr[-4000:])
    return float(out.stdout.strip().splitlines()[-1])


FLOOR = """
import time, dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_START_TAG as S, ASSET_PARTITION_RANGE_END_TAG as E
daily = dg.DailyPartitionsDefinition(start_date=FIRST)

@dg.multi_asset(specs=[dg.AssetSpec(["floor"], skippable=True)], partitions_def=daily, backfill_policy=dg.BackfillPolicy.single_run())
def floor(context):
    for k in context.partition_keys:  # report each partition, doing no work (the way lineage_defs reports a range)
        context.add_asset_metadata({"dagster/row_count": 0}, asset_key=dg.AssetKey(["floor"]), partition_key=k)
    yield dg.MaterializeResult(asset_key=["floor"])

with dg.instance_for_test(overrides=OVERRIDES) as inst:
    t = time.perf_counter()
    r = dg.materialize([floor], instance=inst, tags={S: FIRST, E: LAST})
    assert r.success
    print(time.perf_counter() - t)
"""


def bench_floor(start: dt.date, days: int, overrides: str, env: dict[str, str]) -> float:
    """Dagster alone: a no-op asset reporting each partition of the same range run."""
    last = (start + dt.timedelta(days=days - 1)).isoformat()
    code = f"FIRST, LAST = {start.isoformat()!r}, {last!r}\nOVERRIDES = {overrides}\n" + FLOOR
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode:
        raise SystemExit(out.stderr[-4000:])
    return float(out.stdout.strip().splitlines()[-1])


def bench_plain(state: Path, start: dt.date, days: int) -> float:
    with connect(state) as s:
        c = s.conn
        first = (start).isoformat()
        c.execute(f"CREATE TABLE lake.main.events_daily AS {PLAIN_SELECT} LIMIT 0", {"start": first, "end": first})
        t = time.perf_counter()
        for i in range(days):
            a, b = start + dt.timedelta(days=i), start + dt.timedelta(days=i + 1)
            c.execute(f"INSERT INTO lake.main.events_daily {PLAIN_SELECT}", {"start": a.isoformat(), "end": b.isoformat()})
        return time.perf_counter() - t


def bench_dbt(state: Path, work: Path, start: dt.date, days: int) -> float:
    from lineage_defs.run.substrates import extension_directory

    proj = work / "dbt_bench"
    (proj / "models").mkdir(parents=True)
    (proj / "dbt_project.yml").write_text("name: dbt_bench\nversion: '1.0.0'\nprofile: dbt_bench\nmodel-paths: [models]\n")
    (proj / "profiles.yml").write_text(
        textwrap.dedent(
            f"""
            dbt_bench:
              target: dev
              outputs:
                dev:
                  type: duckdb
                  path: {work / 'dbt.duckdb'}
                  database: lake
                  schema: main
                  threads: 1
                  config_options:
                    extension_directory: {extension_directory()}
                    autoinstall_known_extensions: false
                  attach:
                    - path: "ducklake:{state / 'lake' / 'metadata.ducklake'}"
                      alias: lake
                      options:
                        data_path: "{state / 'lake' / 'data'}/"
            """
        )
    )
    (proj / "models" / "sources.yml").write_text(
        "version: 2\nsources:\n  - name: raw\n    database: lake\n    schema: main\n    tables:\n      - name: raw_events\n        config:\n          event_time: event_ts\n"
    )
    (proj / "models" / "events_daily.sql").write_text(
        textwrap.dedent(
            f"""
            {{{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='event_ts',
                      batch_size='day', begin='{start.isoformat()}', database='lake') }}}}
            SELECT event_id, user_id, amount, CAST(amount * 100 AS BIGINT) AS amount_cents, event_ts
            FROM {{{{ source('raw', 'raw_events') }}}}
            """
        )
    )
    dbt = Path(sys.executable).parent / "dbt"
    env = {**os.environ, "DBT_PROFILES_DIR": str(proj), "DO_NOT_TRACK": "1", "DBT_SEND_ANONYMOUS_USAGE_STATS": "false"}
    end = start + dt.timedelta(days=days)
    t = time.perf_counter()
    out = subprocess.run(
        [str(dbt), "run", "--project-dir", str(proj), "--event-time-start", start.isoformat(), "--event-time-end", end.isoformat()],
        capture_output=True, text=True, env=env, cwd=proj,
    )
    el = time.perf_counter() - t
    if out.returncode:
        raise SystemExit(f"dbt failed:\n{out.stdout[-4000:]}\n{out.stderr[-2000:]}")
    return el


def count(state: Path, env: dict[str, str] | None = None) -> int:
    with connect(state, env) as s:
        return int(s.conn.execute("SELECT count(*) FROM lake.main.events_daily").fetchone()[0])


def bench_run_layer(work: Path, start: dt.date, days: int, rows: int) -> tuple[float, float]:
    """(lineage_defs run layer, plain INSERT) seconds, partition by partition interleaved in one process.

    The same lake, the same raw table, two targets written alternately: machine
    noise hits both alike, so the difference is our layer's own per-partition cost
    (without Dagster).
    """
    from lineage_defs.project import load_project
    from lineage_defs.run.context import PartitionWindow
    from lineage_defs.run.sql_step import StepRunner
    from lineage_defs.settings import LineageSettings
    from lineage_defs.run.substrates import Session

    state, root = work / "run-layer", work / "pipelines-run-layer"
    make_raw(state, start, days, rows)
    (root / "bench").mkdir(parents=True)
    (root / "bench" / "events_daily.sql").write_text(STEP.format(start=start.isoformat()))
    step = load_project(root).steps[0]
    settings = LineageSettings(state_dir=str(state), pipelines_dir=str(root))
    utc = dt.timezone.utc
    ours = plain = 0.0
    with Session(settings) as session:
        runner = StepRunner(settings, step, session=session)
        c = session.conn
        c.execute(f"CREATE TABLE lake.main.plain_daily AS {PLAIN_SELECT} LIMIT 0", {"start": start.isoformat(), "end": start.isoformat()})
        for i in range(days):
            a, b = start + dt.timedelta(days=i), start + dt.timedelta(days=i + 1)
            w = PartitionWindow(a.isoformat(), dt.datetime.combine(a, dt.time(), utc), dt.datetime.combine(b, dt.time(), utc))
            for which in (("ours", "plain") if i % 2 else ("plain", "ours")):
                t = time.perf_counter()
                if which == "ours":
                    r = runner.run(w)
                    assert r.error is None, r.error
                    ours += time.perf_counter() - t
                else:
                    c.execute(f"INSERT INTO lake.main.plain_daily {PLAIN_SELECT}", {"start": a.isoformat(), "end": b.isoformat()})
                    plain += time.perf_counter() - t
    return ours, plain


class Postgres:
    """A throwaway PostgreSQL cluster (as tests/conftest.py starts one); a fresh database per Dagster run."""

    BIN = Path("/usr/lib/postgresql/15/bin")

    def __init__(self, work: Path) -> None:
        import shutil
        import socket

        def as_pg(*cmd: str) -> list[str]:
            return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)

        self.as_pg = as_pg
        self.root = Path(tempfile.mkdtemp(prefix="lineage-bench-pg-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        data = self.root / "data"
        subprocess.run(as_pg(str(self.BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"), check=True, capture_output=True)
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -c fsync=off -c full_page_writes=off -c unix_socket_directories={self.root}"
        subprocess.run(as_pg(str(self.BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.root / "log"), "-w", "start"), check=True, capture_output=True)
        self.n = 0

    def database(self) -> str:
        """A new empty database; its SQLAlchemy URL (psycopg2: dagster-postgres's NOTIFY fails on psycopg 3)."""
        import psycopg

        self.n += 1
        name = f"dagster_{self.n}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} dbname=postgres user=postgres", autocommit=True) as c:
            c.execute(f"CREATE DATABASE {name}")
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        import shutil

        subprocess.run(self.as_pg(str(self.BIN / "pg_ctl"), "-D", str(self.root / "data"), "stop", "-m", "immediate"), capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


CELERY_JOBS = """\
import dagster as dg

from lineage_defs.definitions import defs as lineage

defs = dg.Definitions.merge(lineage, dg.Definitions(jobs=[dg.define_asset_job("backfill", selection=dg.AssetSelection.groups("bench"))]))


def backfill():
    return defs.get_job_def("backfill")
"""
# One orchestrating process: a range run per chunk it is given (one step each, sent to the workers).
CELERY_DRIVER = """\
import sys

from dagster import DagsterInstance, execute_job, reconstructable

import bench_celery_jobs

job = reconstructable(bench_celery_jobs.backfill)
with DagsterInstance.get() as instance:
    for chunk in sys.argv[1:]:
        first, last = chunk.split("...")
        tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
        assert execute_job(job, instance, tags=tags).success, chunk
"""
DAGSTER_PG_YAML = """\
storage:
  postgres:
    postgres_url: "{url}"
telemetry:
  enabled: false
"""


def bench_celery(work: Path, start: dt.date, days: int, rows: int, workers: int, chunks: int, drivers: int) -> float:
    """The backfill on the multi-machine setup of docs/deploy.md, on this one machine: Dagster and the
    DuckLake catalog on PostgreSQL, the lake's data on an S3 server (moto), steps on ``workers`` Celery
    workers (redis-server as the broker), each process with its own state dir. The range is cut into
    ``chunks`` range runs (a range run is one step: one worker), from ``drivers`` orchestrating processes
    at once. Returns the seconds from the drivers' start to the last run's end; checks every row."""
    import shutil
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    def free() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return int(sock.getsockname()[1])

    root = work / f"celery-{workers}"
    code = root / "code"
    (root / "pipelines" / "bench").mkdir(parents=True)
    code.mkdir()
    (root / "pipelines" / "bench" / "events_daily.sql").write_text(STEP.format(start=start.isoformat()))
    pg = Postgres(work)
    s3_port, redis_port = free(), free()
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request
    s3 = ThreadedMotoServer(ip_address="127.0.0.1", port=s3_port, verbose=False)
    s3.start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{s3_port}", aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1").create_bucket(Bucket="bench")
        dagster_url = pg.database()
        lake_url = pg.database()
        lake_dsn = f"host=127.0.0.1 port={pg.port} user=postgres dbname={lake_url.rsplit('/', 1)[1]}"
        broker, backend = f"redis://127.0.0.1:{redis_port}/0", f"redis://127.0.0.1:{redis_port}/1"
        (code / "bench_celery_jobs.py").write_text(CELERY_JOBS)
        (code / "driver.py").write_text(CELERY_DRIVER)
        (code / "dagster_celery_config.py").write_text(f"broker_url = {broker!r}\nresult_backend = {backend!r}\ntask_acks_late = True\n")
        home = root / "dagster_home"
        home.mkdir()
        (home / "dagster.yaml").write_text(DAGSTER_PG_YAML.format(url=dagster_url))
        shared = {
            "LINEAGE_PIPELINES_DIR": str(root / "pipelines"),
            "LINEAGE_DUCKLAKE_CATALOG": f"postgres:{lake_dsn}",
            "LINEAGE_DUCKLAKE_DATA_PATH": "s3://bench/lake/",
            "LINEAGE_S3_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}",
            "LINEAGE_S3_BUCKET": "bench",
            "LINEAGE_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "LINEAGE_CELERY_BROKER_URL": broker,
            "LINEAGE_CELERY_BACKEND_URL": backend,
        }
        make_raw(root / "state-setup", start, days, rows, shared)
        redis = shutil.which("redis-server") or "/usr/bin/redis-server"
        procs.append(subprocess.Popen([redis, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                                      stdout=subprocess.DEVNULL, start_new_session=True))  # fmt: skip

        def machine(name: str) -> dict[str, str]:
            (root / f"state-{name}").mkdir()
            return {**os.environ, **shared, "LINEAGE_STATE_DIR": str(root / f"state-{name}"), "PYTHONPATH": str(code)}

        celery = str(Path(sys.executable).with_name("celery"))
        logs = []
        for i in range(workers):
            log = root / f"worker-{i}.log"
            logs.append(log)
            argv = [celery, "-A", "dagster_celery.app", "worker", "-n", f"w{i}@%h", "--concurrency=1", "--prefetch-multiplier=1",
                    "-l", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
            procs.append(subprocess.Popen(argv, env=machine(f"worker{i}"), cwd=root, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True))
        deadline = time.monotonic() + 180
        while not all("ready." in log.read_text(errors="replace") for log in logs):
            if time.monotonic() > deadline:
                raise SystemExit("celery workers not ready:\n" + "\n".join(log.read_text(errors="replace")[-2000:] for log in logs))
            time.sleep(0.2)
        bounds = [round(i * days / chunks) for i in range(chunks + 1)]
        ranges = [f"{start + dt.timedelta(days=a)}...{start + dt.timedelta(days=b - 1)}" for a, b in zip(bounds, bounds[1:]) if b > a]
        def drive(name: str, chunks: list[str]) -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, str(code / "driver.py"), *chunks], cwd=root,
                                    env={**machine(name), "DAGSTER_HOME": str(home)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip

        def wait(runs: list[subprocess.Popen[bytes]]) -> None:
            for r, out in zip(runs, [r.communicate()[0] for r in runs]):
                if r.returncode:
                    raise SystemExit(out.decode(errors="replace")[-4000:])

        t = time.perf_counter()
        # The first range run alone: it creates the table (two first writes of a new DuckLake table at
        # once conflict in the catalog and the later one is written again: a retry the figures leave out).
        wait([drive("driver-first", ranges[:1])])
        wait([drive(f"driver{i}", ranges[1:][i::drivers]) for i in range(drivers)])
        elapsed = time.perf_counter() - t
        steps = [log.read_text(errors="replace").count("succeeded in") for log in logs]
        n = count(root / "state-check", shared)
        assert n == days * rows, f"celery backfill wrote {n} rows"
        print(f"celery, {workers} worker(s): {elapsed:7.2f}s  rows {n:,}; {len(ranges)} range runs from {drivers} processes, steps per worker {steps}", flush=True)
        return elapsed
    finally:
        for p in reversed(procs):
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            p.wait(10)
        s3.stop()
        pg.stop()


def main_celery(args: argparse.Namespace) -> None:
    start = dt.date(2024, 1, 1)
    with tempfile.TemporaryDirectory(prefix="lineage-backfill-celery-") as tmp:
        res = {w: bench_celery(Path(tmp), start, args.days, args.rows, w, args.celery_runs, args.celery_drivers) for w in (1, 2)}
    print(f"{args.days} days, {args.rows} rows a day, on Celery: 1 worker {res[1]:.2f}s, 2 workers {res[2]:.2f}s, "
          f"2 workers / 1 worker {res[2] / res[1]:.2f}x  (figures, not targets: one machine with {os.cpu_count()} cores runs both workers, "
          f"the orchestrators, PostgreSQL, redis and the S3 server)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--skip-dbt", action="store_true")
    ap.add_argument("--skip-postgres", action="store_true")
    ap.add_argument("--celery", action="store_true", help="only the backfill on Celery workers (1, then 2), nothing else")
    ap.add_argument("--celery-runs", type=int, default=12, help="range runs the backfill is cut into (a range run is one step)")
    ap.add_argument("--celery-drivers", type=int, default=2, help="orchestrating processes submitting the range runs at once")
    args = ap.parse_args()
    if args.celery:
        return main_celery(args)
    start = dt.date(2024, 1, 1)
    days = args.days
    with tempfile.TemporaryDirectory(prefix="lineage-backfill-") as tmp:
        work = Path(tmp)
        pg = None if args.skip_postgres else Postgres(work)
        try:
            res: dict[str, float] = {}

            def contender(name: str, run: object) -> None:
                state = work / name
                # DuckLake records its data path in the catalog: build the raw table per contender
                make_raw(state, start, days, args.rows)
                res[name] = run(state)  # type: ignore[operator]
                n = count(state)
                print(f"{name:28s} {res[name]:7.2f}s  rows {n:,}", flush=True)
                assert n == days * args.rows, f"{name} wrote {n} rows"

            contender("plain DuckDB loop", lambda st: bench_plain(st, start, days))
            if not args.skip_dbt:
                contender("dbt-duckdb microbatch", lambda st: bench_dbt(st, work, start, days))
            for mode, extra in (("per-partition", ""), ("set-based", SET_BASED)):
                root = work / f"pipelines-{mode}"
                (root / "bench").mkdir(parents=True, exist_ok=True)
                step = STEP.format(start=start.isoformat()).replace(f"start={start.isoformat()}", f"start={start.isoformat()}{extra}", 1)
                (root / "bench" / "events_daily.sql").write_text(step)
                for storage, kind, env in STORAGES:
                    if kind == "postgres" and pg is None or storage == "postgres, 1 planned event" and mode == "per-partition":
                        continue  # one planned event only matters for the cheap set-based runs
                    ov = instance_overrides(kind, pg.database() if kind == "postgres" and pg else None)
                    contender(f"lineage_defs {mode} [{storage}]", lambda st, r=root, o=ov, e=env: bench_ours(st, r, start, days, o, e))
            for storage, kind, env in STORAGES:
                if kind == "postgres" and pg is None:
                    continue
                ov = instance_overrides(kind, pg.database() if kind == "postgres" and pg else None)
                res[f"dagster floor [{storage}]"] = bench_floor(start, days, ov, env)
                print(f"{'dagster floor [' + storage + ']':28s} {res[f'dagster floor [{storage}]']:7.2f}s  (a no-op asset reporting the same {days} partitions in one range run)", flush=True)
        finally:
            if pg is not None:
                pg.stop()
        layer, layer_plain = bench_run_layer(work, start, days, args.rows)
        plain = res["plain DuckDB loop"]
        dbt = res.get("dbt-duckdb microbatch")
        print()
        print(f"run layer alone (no Dagster), interleaved with the plain INSERT partition by partition: {layer:.2f}s vs {layer_plain:.2f}s, "
              f"{1000 * (layer - layer_plain) / days:+.1f} ms a partition (target <= 10 ms)")
        for storage, _, env in STORAGES:
            if f"dagster floor [{storage}]" not in res:
                continue
            floor = res[f"dagster floor [{storage}]"]
            sb = res[f"lineage_defs set-based [{storage}]"]
            print(f"Dagster on {storage}{' (' + ', '.join(f'{k}={v}' for k, v in env.items()) + ')' if env else ''}:")
            print(f"  set-based / plain loop:          {sb / plain:5.2f}x  (target <= 1.0x)")
            if dbt:
                print(f"  dbt microbatch / set-based:      {dbt / sb:5.2f}x  (target >= 3x)")
            pp = res.get(f"lineage_defs per-partition [{storage}]")
            if pp is not None:
                print(f"  per-partition overhead over the plain insert, net of Dagster's floor: {1000 * (pp - floor - plain) / days:5.1f} ms  (target <= 10 ms)")
                print(f"  per-partition / plain loop:      {pp / plain:5.2f}x")
            print(f"  Dagster's floor alone: {floor:.2f}s, {1000 * floor / days:.1f} ms a partition")


if __name__ == "__main__":
    main()
