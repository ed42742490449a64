"""Backfill benchmark: 365 daily partitions of a managed DuckLake step as ONE range run.

    .venv/bin/python bench/backfill.py [--days 365] [--rows 10000] [--skip-dbt]

Three contenders write the same rows (about --rows per day) from the same raw
DuckLake table into a DuckLake table:
- lineage_defs: the step below, materialized through Dagster as one run over
  the whole partition range (BackfillPolicy.single_run), one transaction and
  one reported materialization per partition, on Dagster's default
  SQLite event log (two event-log writes per partition: planned and
  materialized);
- plain DuckDB: a Python loop running the same INSERT ... SELECT per day;
- dbt-duckdb: an incremental `microbatch` model (batch_size=day) built with
  `dbt run --event-time-start/--event-time-end` over the same days.
Prints total seconds, ratios, and lineage_defs' per-partition overhead.
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
    from lineage_defs.run.substrates import RunSettings, Session

    return Session(RunSettings(state_dir=str(state)))


def make_raw(state: Path, start: dt.date, days: int, rows: int) -> None:
    with connect(state) as s:
        s.conn.execute(
            f"""CREATE TABLE lake.main.raw_events AS
            SELECT i AS event_id, (i * 7919) % 100000 AS user_id, round(((i * 31) % 10000) / 100.0, 2) AS amount,
                   TIMESTAMP '{start.isoformat()}' + to_microseconds(CAST((i * 86400000000) // {rows} AS BIGINT)) AS event_ts
            FROM range({days * rows}) t(i)"""
        )


def bench_ours(state: Path, root: Path, start: dt.date, days: int) -> float:
    code = textwrap.dedent(
        f"""
        import time, dagster as dg
        from dagster._core.storage.tags import ASSET_PARTITION_RANGE_START_TAG as S, ASSET_PARTITION_RANGE_END_TAG as E
        from lineage_defs import build_definitions, LineageSettings, LineageResource
        defs = build_definitions({str(root)!r}, settings=LineageSettings(state_dir={str(state)!r}),
                                 resource=LineageResource(pipelines_dir={str(root)!r}, state_dir={str(state)!r}))
        first, last = {start.isoformat()!r}, {(start + dt.timedelta(days=days - 1)).isoformat()!r}
        with dg.instance_for_test() as inst:
            t = time.perf_counter()
            r = dg.materialize(defs.assets, instance=inst, resources=defs.resources, tags={{S: first, E: last}})
            el = time.perf_counter() - t
            mats = [e for e in r.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
            assert r.success and len(mats) == {days}, (r.success, len(mats))
        print(el)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-4000:])
    return float(out.stdout.strip().splitlines()[-1])


FLOOR = """
import time, dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_START_TAG as S, ASSET_PARTITION_RANGE_END_TAG as E
daily = dg.DailyPartitionsDefinition(start_date=FIRST)

@dg.multi_asset(specs=[dg.AssetSpec(["floor"], skippable=True)], partitions_def=daily, backfill_policy=dg.BackfillPolicy.single_run())
def floor(context):
    for k in context.partition_keys:  # report each partition, doing no work
        yield dg.AssetMaterialization(asset_key=["floor"], partition=k, metadata={"dagster/row_count": 0})

with dg.instance_for_test() as inst:
    t = time.perf_counter()
    r = dg.materialize([floor], instance=inst, tags={S: FIRST, E: LAST})
    assert r.success
    print(time.perf_counter() - t)
"""


def bench_floor(start: dt.date, days: int) -> float:
    """Dagster alone: a no-op asset reporting each partition of the same range run."""
    last = (start + dt.timedelta(days=days - 1)).isoformat()
    code = f"FIRST, LAST = {start.isoformat()!r}, {last!r}\n" + FLOOR
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--skip-dbt", action="store_true")
    args = ap.parse_args()
    start = dt.date(2024, 1, 1)
    with tempfile.TemporaryDirectory(prefix="lineage-backfill-") as tmp:
        work = Path(tmp)
        results = {}
        for name in ("plain", "lineage_defs", "dbt"):
            if name == "dbt" and args.skip_dbt:
                continue
            state = work / name
            # DuckLake records its data path in the catalog: build the raw table per contender
            t = time.perf_counter()
            make_raw(state, start, args.days, args.rows)
            print(f"{name:13s} raw data: {args.days * args.rows:,} rows in {time.perf_counter() - t:.1f}s")
            if name == "lineage_defs":
                root = work / "pipelines"
                (root / "bench").mkdir(parents=True, exist_ok=True)
                (root / "bench" / "events_daily.sql").write_text(STEP.format(start=start.isoformat()))
                results[name] = bench_ours(state, root, start, args.days)
            elif name == "plain":
                results[name] = bench_plain(state, start, args.days)
            else:
                results[name] = bench_dbt(state, work, start, args.days)
            n = count(state)
            print(f"{name:13s} {results[name]:7.2f}s  rows {n:,}")
            assert n == args.days * args.rows, f"{name} wrote {n} rows"
        floor = bench_floor(start, args.days)
        print(f"dagster floor  {floor:7.2f}s  (a no-op asset reporting the same {args.days} partitions in one range run)")
        ours, plain = results["lineage_defs"], results["plain"]
        print(f"lineage_defs / plain DuckDB script: {ours / plain:.2f}x (target < 2x)")
        print(f"lineage_defs without Dagster's own floor / plain: {(ours - floor) / plain:.2f}x")
        if "dbt" in results:
            print(f"lineage_defs / dbt-duckdb microbatch: {ours / results['dbt']:.2f}x (target < 1x; dbt {results['dbt']:.2f}s)")
        print(f"per-partition overhead over the plain insert: {1000 * (ours - plain) / args.days:.1f} ms; per partition total {1000 * ours / args.days:.1f} ms")


if __name__ == "__main__":
    main()
