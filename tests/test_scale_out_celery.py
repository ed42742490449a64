"""Steps on Celery workers (``LINEAGE_CELERY_BROKER_URL``), nothing shared on local disk.

Every process has its own empty state dir: two Celery workers (``celery -A dagster_celery.app
worker``, Debian's redis-server as the broker, started here) and three orchestrating processes that
run one partition per run. Dagster and the DuckLake catalog are on the suite's PostgreSQL, the lake's
data on the S3 server. A 30-partition backfill is 30 runs, one step each, spread over both workers:
every partition is materialized once and both workers did work. Then the worker running a step is
SIGKILLed (process group) in the middle of it and the other runs it again in the same run (rows once);
a changed script meets on_schema_change=fail on a fresh worker. Afterwards each state dir holds only
caches and its own schema copies.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from scale_support import create_database, dagster_home, files_under, lake_env, machine_env
from services import Supervised, wait_for, wait_port
from webserver import free_port

pytestmark = pytest.mark.slow

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
DAYS = [f"2025-01-{d:02d}" for d in range(1, 31)]
ORDERS = """\
-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/orders_{tag} on_schema_change=fail
SELECT range AS id, $partition AS day FROM range(50)
"""
# A partition long enough to be killed in the middle of.
BIG = """\
-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/big_{tag}
SELECT range AS id, $partition AS day, md5(CAST(range AS VARCHAR)) AS h FROM range(3000000)
"""
CHANGED = ORDERS.replace("AS day FROM", "AS day, 1 AS extra FROM")
# The runs' job, importable by module name on every worker (workers rebuild it from this pointer).
JOBS = """\
import dagster as dg

from lineage_defs.definitions import defs as lineage

defs = dg.Definitions.merge(lineage, dg.Definitions(jobs=[
    dg.define_asset_job("orders", selection=dg.AssetSelection.groups("shop")),
    dg.define_asset_job("big", selection=dg.AssetSelection.groups("heavy")),
]))


def orders():
    return defs.get_job_def("orders")


def big():
    return defs.get_job_def("big")
"""
# One orchestrating process: a run per partition it is given, each run's step sent to the workers.
DRIVER = """\
import sys

from dagster import DagsterInstance, execute_job, reconstructable

import lineage_celery_jobs

job = reconstructable(getattr(lineage_celery_jobs, sys.argv[1]))
with DagsterInstance.get() as instance:
    for key in sys.argv[2:]:
        result = execute_job(job, instance, tags={"dagster/partition": key})
        print(key, "ok" if result.success else "FAILED", result.run_id, flush=True)
"""


def _worker(name: str, tmp: Path, env: dict[str, str], code: Path) -> Supervised:
    home = tmp / f"worker-{name}"
    home.mkdir()
    argv = [str(Path(sys.executable).with_name("celery")), "-A", "dagster_celery.app", "worker", "--prefetch-multiplier=1",
            "-n", f"{name}@%h", "--concurrency=1", "-l", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    w = Supervised(argv, home, {**env, "PYTHONPATH": str(code)}, tmp / f"worker-{name}.log")
    w.start()
    wait_for(f"worker {name} ready", lambda: "ready." in w.log_tail(20000), 120, w.log_tail)
    return w


def _log(w: Supervised) -> str:
    return w.log_tail(10**7)


def _drive(tmp: Path, env: dict[str, str], code: Path, name: str, job: str, keys: list[str]) -> subprocess.Popen[str]:
    """One orchestrating process ("machine" ``name``, its own state dir): a run of ``job`` per partition."""
    state = tmp / f"state-{name}"
    return subprocess.Popen([sys.executable, str(code / "driver.py"), job, *keys], cwd=state, env=machine_env(env, state),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip


def test_a_backfill_runs_its_steps_on_two_celery_workers(tmp_path: Path, pg_dsn: str, s3_server: Any) -> None:
    import dagster as dg

    from lineage_defs.run.substrates import Session
    from lineage_defs.settings import LineageSettings

    tag = uuid.uuid4().hex[:8]
    home = dagster_home(tmp_path / "dagster_home", pg_dsn, f"dagster_{tag}")
    lake_dsn = create_database(pg_dsn, f"lake_{tag}")
    root = tmp_path / "pipelines"
    (root / "shop").mkdir(parents=True)
    (root / "heavy").mkdir(parents=True)
    (root / "shop" / "orders.sql").write_text(ORDERS.format(tag=tag))
    (root / "heavy" / "big.sql").write_text(BIG.format(tag=tag))
    code = tmp_path / "code"
    code.mkdir()
    (code / "lineage_celery_jobs.py").write_text(JOBS)
    (code / "driver.py").write_text(DRIVER)
    port = free_port()
    broker, backend = f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1"
    # Read by dagster_celery.app when a worker starts. A killed worker's task is delivered again
    # (acks late, requeued on a lost worker) once the visibility timeout passed: longer than any step here.
    (code / "dagster_celery_config.py").write_text(
        f"broker_url = {broker!r}\nresult_backend = {backend!r}\ntask_acks_late = True\ntask_reject_on_worker_lost = True\n"
        "broker_transport_options = {'visibility_timeout': 30}\n"
    )
    shared = {
        "LINEAGE_PIPELINES_DIR": str(root),
        **lake_env(lake_dsn, s3_server, f"lake-{tag}"),
        "LINEAGE_CELERY_BROKER_URL": broker,
        "LINEAGE_CELERY_BACKEND_URL": backend,
    }
    run_env = {**shared, "DAGSTER_HOME": str(home), "PYTHONPATH": str(code)}
    settings = LineageSettings.from_env({**shared, "LINEAGE_STATE_DIR": str(tmp_path / "check")})
    redis = Supervised([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], tmp_path, {}, tmp_path / "redis.log")
    workers: dict[str, Supervised] = {}
    drivers: list[subprocess.Popen[str]] = []

    def finish(p: subprocess.Popen[str]) -> str:
        return p.communicate(timeout=600)[0]

    try:
        redis.start()
        wait_port(port, 30, redis.alive)
        for name in ("A", "B"):
            workers[name] = _worker(name, tmp_path, machine_env(shared, tmp_path / f"state-{name}"), code)

        # 1. a 30-partition backfill: 30 runs from three orchestrating processes, one step each
        start = time.monotonic()
        drivers = [_drive(tmp_path, run_env, code, f"run{i}", "orders", DAYS[i::3]) for i in range(3)]
        for d, out in zip(drivers, [finish(d) for d in drivers]):
            assert d.returncode == 0 and out.count(" ok ") == 10, out[-4000:]
        backfill = time.monotonic() - start
        done = {n: _log(w).count("succeeded in") for n, w in workers.items()}
        assert sum(done.values()) == 30 and all(done.values()), (done, backfill)
        with Session(settings, skip=frozenset({"duckdb://warehouse"})) as s:
            rows = s.conn.execute(f"SELECT count(*), count(DISTINCT _partition), count(DISTINCT (id, day)) FROM lake.main.orders_{tag}").fetchall()
        assert rows == [(30 * 50, 30, 30 * 50)]

        # 2. the worker running a step is SIGKILLed (its whole process group) in the middle of it:
        # the other worker runs the step again inside the same run, and the rows are there once
        with dg.DagsterInstance.from_config(str(home)) as instance:
            received = {n: _log(w).count("received") for n, w in workers.items()}
            drivers = [_drive(tmp_path, run_env, code, "run-kill", "big", [DAYS[0]])]

            def started() -> str | None:
                runs = instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": DAYS[0]}, job_name="big"))
                if runs and instance.all_logs(runs[0].dagster_run.run_id, of_type=dg.DagsterEventType.STEP_START):
                    return runs[0].dagster_run.run_id
                return None

            run_id = wait_for("the big step to start on a worker", started, 180, lambda: "".join(_log(w)[-3000:] for w in workers.values()), 0.1)
            victim = next(n for n, w in workers.items() if _log(w).count("received") > received[n])
            survivor = next(n for n in workers if n != victim)
            workers[victim].crash()
            out = finish(drivers[0])
            assert drivers[0].returncode == 0 and " ok " in out, out[-4000:]
            assert len(instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_START)) == 2
            assert _log(workers[survivor]).count("succeeded in") == done[survivor] + 1
        with Session(settings, skip=frozenset({"duckdb://warehouse"})) as s:
            big = s.conn.execute(f"SELECT count(*), count(DISTINCT id), count(DISTINCT _partition) FROM lake.main.big_{tag}").fetchall()
        assert big == [(3000000, 3000000, 1)]

        # 3. a changed script on a fresh worker (workers keep the code they imported: restarted on a
        # deploy) with an empty state dir: on_schema_change=fail compares with the table the others wrote
        workers[survivor].stop()
        (root / "shop" / "orders.sql").write_text(CHANGED.format(tag=tag))
        workers["C"] = _worker("C", tmp_path, machine_env(shared, tmp_path / "state-C"), code)
        drivers = [_drive(tmp_path, run_env, code, "run-change", "orders", [DAYS[4]])]
        out = finish(drivers[0])
        assert "FAILED" in out, out[-4000:]
        assert "received" in _log(workers["C"])
        with dg.DagsterInstance.from_config(str(home)) as instance:
            run = instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": DAYS[4]}, job_name="orders", statuses=[dg.DagsterRunStatus.FAILURE]))
            assert len(run) == 1
            failures = instance.all_logs(run[0].dagster_run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            message = " ".join(str(f.dagster_event.step_failure_data.error) for f in failures if f.dagster_event)
            assert f"schema of ducklake://main/orders_{tag} differs from the slice: +extra" in message, message[-3000:]
            assert instance.get_materialized_partitions(dg.AssetKey(["ducklake", "main", f"orders_{tag}"])) == set(DAYS)
    finally:
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait(10)
        for w in workers.values():
            w.stop()
        redis.stop()

    # no process read another's disk: each state dir holds its caches and its own schema copies only
    for d in sorted(tmp_path.glob("state-*")):
        assert all(f.startswith(("cache/", "schemas/")) for f in files_under(d)), (d.name, files_under(d))
    print(f"backfill of 30 partitions over 2 workers: {backfill:.1f}s, steps per worker {done}")
