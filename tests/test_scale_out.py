"""docs/deploy.md's scale-out setup, run for real: Dagster on PostgreSQL storage (dagster-postgres)
and DuckLake on a PostgreSQL catalog with its data on an S3 server. Two runs, each its own
process (`dagster asset materialize`), write the same lake at the same time: nothing is lost,
no embedded file or lock is touched, and Dagster's PostgreSQL storage records every partition.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest

from scale_support import DAGSTER_YAML, create_database as _create_database, lake_env, pg_url as _pg_url
from services import IN_PROCESS

pytestmark = [pytest.mark.daemon, pytest.mark.scale]

PER_PARTITION = """\
-- Orders of one day, one transaction per partition.
-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/orders_{tag}
SELECT range AS id, $partition AS day FROM range(100)
"""

SET_BASED = """\
-- Events of a whole range at once, one transaction per batch of 5 days.
-- pipeline
-- partitioned daily start=2025-01-01 time_column=ts batch=5
-- materialize ducklake://main/events_{tag}
SELECT range AS id, CAST($partition_start AS TIMESTAMP) + INTERVAL (range * 15) MINUTE AS ts
FROM range(CAST(date_diff('minute', CAST($partition_start AS TIMESTAMP), CAST($partition_end AS TIMESTAMP)) / 15 AS BIGINT))
"""


def test_two_runs_write_the_lake_concurrently_on_postgres_and_s3(tmp_path: Path, pg_dsn: str, s3_server: Any) -> None:
    import dagster as dg
    import psycopg

    tag = uuid.uuid4().hex[:8]
    dagster_db, lake_db = f"dagster_{tag}", f"lake_{tag}"
    _create_database(pg_dsn, dagster_db)
    lake_dsn = _create_database(pg_dsn, lake_db)
    home, root, state = tmp_path / "dagster_home", tmp_path / "pipelines", tmp_path / "state"
    home.mkdir()
    (home / "dagster.yaml").write_text(DAGSTER_YAML.format(url=_pg_url(pg_dsn, dagster_db)))
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "orders.sql").write_text(PER_PARTITION.format(tag=tag))
    (root / "shop" / "events.sql").write_text(SET_BASED.format(tag=tag))
    s3 = s3_server.settings()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "LINEAGE_PIPELINES_DIR": str(root),
        "LINEAGE_STATE_DIR": str(state),
        **lake_env(lake_dsn, s3_server, f"lake-{tag}"),
    }
    dagster = str(Path(sys.executable).with_name("dagster"))
    days = ("2025-01-01", "2025-01-30")
    runs = []
    for asset in (f"ducklake/main/orders_{tag}", f"ducklake/main/events_{tag}"):
        cmd = [dagster, "asset", "materialize", "-m", "lineage_defs.definitions", "-a", "defs", "--select", asset, "--partition-range", f"{days[0]}...{days[1]}", *IN_PROCESS]
        runs.append(subprocess.Popen(cmd, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = []
    try:
        for p in runs:
            out, _ = p.communicate(timeout=240)
            outputs.append(out)
            assert p.returncode == 0, out[-4000:]
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
                p.wait(10)

    # 1. No embedded file, no lock file: the runs never touched the state dir's DuckDB files.
    assert not (state / ".duckdb.lock").exists() and not (state / "lake").exists() and not (state / "warehouse.duckdb").exists()
    # 2. Nothing lost: every partition of both tables, read back through a fresh DuckLake attach.
    from lineage_defs.settings import LineageSettings
    from lineage_defs.run.substrates import Session

    settings = LineageSettings(
        state_dir=str(state), ducklake_catalog=f"postgres:{lake_dsn}", ducklake_data_path=env["LINEAGE_DUCKLAKE_DATA_PATH"], **s3
    )
    with Session(settings, skip=frozenset({"duckdb://warehouse"})) as s:
        orders = s.conn.execute(f"SELECT count(*), count(DISTINCT _partition), count(DISTINCT (id, day)) FROM lake.main.orders_{tag}").fetchall()
        events = s.conn.execute(f"SELECT count(*), count(DISTINCT _partition), min(_partition), max(_partition) FROM lake.main.events_{tag}").fetchall()
        # which snapshots wrote which table: the two runs' commits interleave in the one catalog
        writers = s.conn.execute(
            "SELECT snapshot_id, changes FROM ducklake_snapshots('lake') WHERE changes::VARCHAR LIKE '%tables_inserted_into%' ORDER BY snapshot_id"
        ).fetchall()
        table_ids = dict(s.conn.execute("SELECT table_name, table_id::VARCHAR FROM ducklake_table_info('lake')").fetchall())
        assert not s.locked
    assert orders == [(30 * 100, 30, 30 * 100)]
    assert events == [(30 * 96, 30, "2025-01-01", "2025-01-30")]
    # 3. The data files are on the S3 server.
    keys = s3_server.client().list_objects_v2(Bucket=s3_server.bucket, Prefix=f"lake-{tag}/").get("KeyCount", 0)
    assert keys >= 30 + 6
    # 4. Dagster's PostgreSQL storage holds both runs and every partition.
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with dg.DagsterInstance.get() as instance:
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            for name in (f"orders_{tag}", f"events_{tag}"):
                done = instance.get_materialized_partitions(dg.AssetKey(["ducklake", "main", name]))
                assert len(done) == 30
            records = instance.get_run_records()
            assert len(records) == 2 and all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records)
            # the two runs overlapped in time (separate processes, writing at once)
            spans = sorted((r.start_time, r.end_time) for r in records)
            assert spans[1][0] < spans[0][1], spans
            # each partition's reported DuckLake snapshot is the one its own commit made, never the other
            # run's commit that happened to be the lake's latest when it looked
            for name in (f"orders_{tag}", f"events_{tag}"):
                wrote = {sid for sid, changes in writers if table_ids[name] in changes.get("tables_inserted_into", [])}
                mats = instance.fetch_materializations(dg.AssetKey(["ducklake", "main", name]), limit=100).records
                reported = {r.asset_materialization.metadata["lineage/ducklake_snapshot_id"].value for r in mats if r.asset_materialization}
                assert reported and reported <= wrote, (name, sorted(reported - wrote))
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    with psycopg.connect(_pg_url(pg_dsn, dagster_db).replace("+psycopg2", "")) as c:
        assert c.execute("SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'").fetchone() == (60,)
    assert len(writers) >= 30 + 6
