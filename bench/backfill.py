"""Backfill benchmark: 365 daily partitions of a managed DuckLake step as ONE range run.

    .venv/bin/python bench/backfill.py [--days 365] [--rows 10000] [--skip-dbt] [--skip-postgres]

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


def connect(state: Path):  # type: ignore[no-untyped-def]
    from lineage_defs.settings import LineageSettings
    from lineage_defs.run.substrates import Session

    return Session(LineageSettings(state_dir=str(state)))


def make_raw(state: Path, start: dt.date, days: int, rows: int) -> None:
    with connect(state) as s:
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


def count(state: Path) -> int:
    with connect(state) as s:
        return int(s.conn.execute("SELECT count(*) FROM lake.main.events_daily").fetchone()[0])


def bench_run_layer(work: Path, start: dt.date, days: int, rows: int) -> tuple[float, float]:
    """(lineage_defs run layer, plain INSERT) seconds, partition by partition interleaved in one process.

    The same lake, the same raw table, two targets written alternately: machine
    noise hits both alike, so the difference is our layer's own per-partition cost
    (without Dagster).
    """
    from lineage_defs.plan.project import load_project
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--skip-dbt", action="store_true")
    ap.add_argument("--skip-postgres", action="store_true")
    args = ap.parse_args()
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
