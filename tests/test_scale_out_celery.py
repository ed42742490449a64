"""Steps on Celery workers (``LINEAGE_CELERY_BROKER_URL``), nothing shared on local disk.

Every process has its own empty state dir: two Celery workers (``celery -A dagster_celery.app
worker``, Debian's redis-server as the broker, started here) and three orchestrating processes that
run one partition per run. Dagster and the DuckLake catalog are on the suite's PostgreSQL, the lake's
data on the S3 server. A 30-partition backfill is 30 runs, one step each, spread over both workers:
every partition is materialized once, both workers did work, and afterwards each state dir holds
only caches and its own schema copies.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from scale_support import create_database, dagster_home, files_under, machine_env
from services import Supervised, wait_for, wait_port
from webserver import free_port

pytestmark = pytest.mark.slow

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
DAYS = [f"2025-01-{d:02d}" for d in range(1, 31)]
ORDERS = """\
-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/orders_{tag}
SELECT range AS id, $partition AS day FROM range(50)
"""
# The runs' job, importable by module name on every worker (workers rebuild it from this pointer).
JOBS = """\
import dagster as dg

from lineage_defs.definitions import defs as lineage

defs = dg.Definitions.merge(lineage, dg.Definitions(jobs=[dg.define_asset_job("orders", selection="*")]))


def orders():
    return defs.get_job_def("orders")
"""
# One orchestrating process: a run per partition it is given, each run's step sent to the workers.
DRIVER = """\
import sys

from dagster import DagsterInstance, execute_job, reconstructable

import lineage_celery_jobs

with DagsterInstance.get() as instance:
    for key in sys.argv[1:]:
        result = execute_job(reconstructable(lineage_celery_jobs.orders), instance, tags={"dagster/partition": key})
        print(key, "ok" if result.success else "FAILED", result.run_id, flush=True)
"""


def _worker(name: str, tmp: Path, env: dict[str, str], code: Path) -> Supervised:
    home = tmp / f"worker-{name}"
    home.mkdir()
    argv = [str(Path(sys.executable).with_name("celery")), "-A", "dagster_celery.app", "worker", "--prefetch-multiplier=1",
            "-n", f"{name}@%h", "--concurrency=1", "-l", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    w = Supervised(argv, home, {**env, "PYTHONPATH": str(code)}, tmp / f"worker-{name}.log")
    w.start()
    return w


def test_a_backfill_runs_its_steps_on_two_celery_workers(tmp_path: Path, pg_dsn: str, s3_server: Any) -> None:
    import dagster as dg

    tag = uuid.uuid4().hex[:8]
    home = dagster_home(tmp_path / "dagster_home", pg_dsn, f"dagster_{tag}")
    lake_dsn = create_database(pg_dsn, f"lake_{tag}")
    root = tmp_path / "pipelines"
    (root / "shop").mkdir(parents=True)
    (root / "shop" / "orders.sql").write_text(ORDERS.format(tag=tag))
    code = tmp_path / "code"
    code.mkdir()
    (code / "lineage_celery_jobs.py").write_text(JOBS)
    (code / "driver.py").write_text(DRIVER)
    port = free_port()
    broker = f"redis://127.0.0.1:{port}/0"
    # dagster_celery.app reads this module when the worker starts
    (code / "dagster_celery_config.py").write_text(f"broker_url = {broker!r}\nresult_backend = 'redis://127.0.0.1:{port}/1'\n")
    s3 = s3_server.settings()
    shared = {
        "LINEAGE_PIPELINES_DIR": str(root),
        "LINEAGE_DUCKLAKE_CATALOG": f"postgres:{lake_dsn}",
        "LINEAGE_DUCKLAKE_DATA_PATH": f"s3://{s3_server.bucket}/lake-{tag}/",
        "LINEAGE_S3_ENDPOINT_URL": s3["s3_endpoint_url"],
        "LINEAGE_S3_BUCKET": s3["s3_bucket"],
        "LINEAGE_S3_REGION": s3["s3_region"],
        "AWS_ACCESS_KEY_ID": s3["s3_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": s3["s3_secret_access_key"],
        "LINEAGE_CELERY_BROKER_URL": broker,
        "LINEAGE_CELERY_BACKEND_URL": f"redis://127.0.0.1:{port}/1",
    }
    redis = Supervised([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], tmp_path, {}, tmp_path / "redis.log")
    workers: list[Supervised] = []
    drivers: list[subprocess.Popen[str]] = []
    try:
        redis.start()
        wait_port(port, 30, redis.alive)
        for name in ("A", "B"):
            workers.append(_worker(name, tmp_path, machine_env(shared, tmp_path / f"state-{name}"), code))
        for w in workers:
            wait_for(f"{w.log_path.name} ready", lambda w=w: "ready." in w.log_tail(20000), 120, w.log_tail)
        start = time.monotonic()
        for i in range(3):  # three orchestrating "machines", ten partitions each
            env = machine_env({**shared, "DAGSTER_HOME": str(home), "PYTHONPATH": str(code)}, tmp_path / f"state-run{i}")
            drivers.append(subprocess.Popen([sys.executable, str(code / "driver.py"), *DAYS[i::3]], cwd=tmp_path / f"state-run{i}", env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))  # fmt: skip
        outs = [d.communicate(timeout=600)[0] for d in drivers]
        elapsed = time.monotonic() - start
        for d, out in zip(drivers, outs):
            assert d.returncode == 0 and out.count(" ok ") == 10, out[-4000:]
        logs = [w.log_tail(10**7) for w in workers]
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait(10)
        for w in workers:
            w.stop()
        redis.stop()

    # both workers executed steps (celery logs each task it finished)
    done = [log.count("succeeded in") for log in logs]
    assert sum(done) == 30 and all(n > 0 for n in done), (done, elapsed)
    # every partition once, read back through a fresh attach of the shared lake
    from lineage_defs.run.substrates import Session
    from lineage_defs.settings import LineageSettings

    settings = LineageSettings.from_env({**shared, "LINEAGE_STATE_DIR": str(tmp_path / "state-check")})
    with Session(settings, skip=frozenset({"duckdb://warehouse"})) as s:
        rows = s.conn.execute(f"SELECT count(*), count(DISTINCT _partition), count(DISTINCT (id, day)) FROM lake.main.orders_{tag}").fetchall()
    assert rows == [(30 * 50, 30, 30 * 50)]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_materialized_partitions(dg.AssetKey(["ducklake", "main", f"orders_{tag}"])) == set(DAYS)
        records = instance.get_run_records()
        assert len(records) == 30 and all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records)
    # no process read another's disk: each state dir holds its caches and its own schema copies only
    for d in sorted(tmp_path.glob("state-*")):
        if d.name != "state-check":
            assert all(f.startswith(("cache/", "schemas/")) for f in files_under(d)), (d.name, files_under(d))
