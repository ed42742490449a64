"""Steps on Celery workers (``LINEAGE_CELERY_BROKER_URL``), nothing shared on local disk.

Every process has its own empty state dir: two Celery workers (``celery -A dagster_celery.app
worker``, Debian's redis-server as the broker, started here), a ``dagster-webserver`` and a real
``dagster-daemon`` (code server, backfill and run-queue daemons, run workers). Dagster and the DuckLake
catalog are on the suite's PostgreSQL, the lake's data on the S3 server. A 4-partition backfill is
launched as a data engineer launches it (``lineage-defs backfill``: GraphQL ``launchPartitionBackfill``
on the webserver); the daemon's backfill daemon makes it 4 runs (a Python step: Dagster's default
policy, one partition per run; a SQL step would be one range run), at most 2 at a time through the run
queue, one step each (the first two wait for each other, so they are on both workers): every partition
is materialized once and both workers did work. Then, from an orchestrating process of its own (``execute_job``), the worker running a step
is SIGKILLed (process group) in the middle of it and the other runs it again in the same run (rows
once); a changed script meets on_schema_change=fail on a fresh worker. Afterwards each state dir holds
only caches and its own schema copies.

The trigger side: a webhook receiver, a real ``dagster-daemon`` (sensors, code server, run workers)
and two Celery workers, each with its own empty state dir, the event store on PostgreSQL
(``LINEAGE_EVENTS_DSN``), Kafka on Tansu: the worker running the posts' batch step is SIGKILLed
(process group) mid-step, the step runs again on the other worker in the same run, and N posts + M
messages are exactly N + M rows in their ``append`` targets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from scale_support import DAGSTER, LINEAGE_DEFS, create_database, dagster_home, files_under, lake_env, machine_env
from services import Receiver, Supervised, Tansu, wait_for, wait_port
from webserver import DagsterDev, free_port, wait_for_location

pytestmark = [pytest.mark.daemon, pytest.mark.scale]

REDIS = shutil.which("redis-server") or "/usr/bin/redis-server"
# Two rounds of the run queue's 2 at once
DAYS = [f"2025-01-{d:02d}" for d in range(1, 5)]
AT_ONCE = 2
N = len(DAYS)
# A Python step: no BackfillPolicy, so a backfill is one run per partition (a SQL step's is one range run).
# The first two steps wait for each other (a file each in a folder of the test's, outside every state dir;
# at most 15 s, well inside the broker's 30 s visibility timeout, after which it would hand a task out
# again): two steps at once, on workers that take one task at a time, are on both workers — whichever
# order the broker hands the tasks out in (one worker took 7 of 8 when they did not wait).
ORDERS = """\
# pipeline
# partitioned daily start=2025-01-01
# materialize ducklake://main/orders_{tag} on_schema_change=fail
import time
from pathlib import Path

import pyarrow as pa

from lineage_defs import runtime

day = runtime.partition().key
meet = Path({meet!r})
(meet / day).touch()
deadline = time.monotonic() + 15
while len(list(meet.iterdir())) < 2 and time.monotonic() < deadline:
    time.sleep(0.2)
runtime.write(pa.table(dict(id=list(range(50)), day=[day] * 50)))
"""
# A partition long enough to be killed in the middle of.
BIG = """\
-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/big_{tag}
SELECT range AS id, $partition AS day, md5(CAST(range AS VARCHAR)) AS h FROM range(3000000)
"""
CHANGED = ORDERS.replace("day=[day] * 50)", "day=[day] * 50, extra=[1] * 50)")
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
# One orchestrating process (the kill and schema-change phases): a run per partition it is given, each
# run's step sent to the workers.
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


def _celery_config(code: Path, visibility_timeout: int) -> tuple[int, str, str]:
    """A redis port, the broker and backend URLs on it, and the workers' ``dagster_celery_config`` in ``code``.

    Read by dagster_celery.app when a worker starts. A killed worker's task is delivered again (acks
    late, requeued on a lost worker) once the visibility timeout passed: longer than any step here."""
    port = free_port()
    broker, backend = f"redis://127.0.0.1:{port}/0", f"redis://127.0.0.1:{port}/1"
    (code / "dagster_celery_config.py").write_text(
        f"broker_url = {broker!r}\nresult_backend = {backend!r}\ntask_acks_late = True\ntask_reject_on_worker_lost = True\n"
        f"broker_transport_options = {{'visibility_timeout': {visibility_timeout}}}\n"
    )
    return port, broker, backend


def _worker(name: str, tmp: Path, env: dict[str, str], code: Path, wait: bool = True) -> Supervised:
    home = tmp / f"worker-{name}"
    home.mkdir()
    argv = [str(Path(sys.executable).with_name("celery")), "-A", "dagster_celery.app", "worker", "--prefetch-multiplier=1",
            "-n", f"{name}@%h", "--concurrency=1", "-l", "INFO", "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    w = Supervised(argv, home, {**env, "PYTHONPATH": str(code)}, tmp / f"worker-{name}.log")
    w.start()
    if wait:
        _ready(name, w)
    return w


def _ready(name: str, w: Supervised) -> None:
    wait_for(f"worker {name} ready", lambda: "ready." in w.log_tail(20000), 120, w.log_tail)


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
    # the daemon's run queue starts at most AT_ONCE runs at once (the backfill's runs would otherwise all start together)
    yaml = (home / "dagster.yaml").read_text()
    queued = f"  class: QueuedRunCoordinator\n  config:\n    max_concurrent_runs: {AT_ONCE}\n    dequeue_interval_seconds: 1\n"
    assert "  class: DefaultRunCoordinator\n" in yaml
    (home / "dagster.yaml").write_text(yaml.replace("  class: DefaultRunCoordinator\n", queued))
    lake_dsn = create_database(pg_dsn, f"lake_{tag}")
    root = tmp_path / "pipelines"
    (root / "shop").mkdir(parents=True)
    (root / "heavy").mkdir(parents=True)
    meet = tmp_path / "meet"
    meet.mkdir()
    (root / "shop" / "orders.py").write_text(ORDERS.format(tag=tag, meet=str(meet)))
    (root / "heavy" / "big.sql").write_text(BIG.format(tag=tag))
    code = tmp_path / "code"
    code.mkdir()
    (code / "lineage_celery_jobs.py").write_text(JOBS)
    (code / "driver.py").write_text(DRIVER)
    (tmp_path / "workspace.yaml").write_text(WORKSPACE)
    port, broker, backend = _celery_config(code, 30)
    shared = {
        "LINEAGE_PIPELINES_DIR": str(root),
        **lake_env(lake_dsn, s3_server, f"lake-{tag}"),
        "LINEAGE_CELERY_BROKER_URL": broker,
        "LINEAGE_CELERY_BACKEND_URL": backend,
    }
    run_env = {**shared, "DAGSTER_HOME": str(home), "PYTHONPATH": str(code)}
    settings = LineageSettings.from_env({**shared, "LINEAGE_STATE_DIR": str(tmp_path / "check")})
    redis = Supervised([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], tmp_path, {}, tmp_path / "redis.log")
    workspace = ["-w", str(tmp_path / "workspace.yaml")]
    web_port = free_port()
    webserver = DagsterDev([str(Path(DAGSTER).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(web_port), *workspace], tmp_path,
                           machine_env(shared, tmp_path / "state-webserver", DAGSTER_HOME=str(home)), web_port, tmp_path / "webserver.log")  # fmt: skip
    daemon = Supervised([str(Path(DAGSTER).with_name("dagster-daemon")), "run", *workspace], tmp_path,
                        machine_env(shared, tmp_path / "state-daemon", DAGSTER_HOME=str(home)), tmp_path / "daemon.log")  # fmt: skip
    workers: dict[str, Supervised] = {}
    drivers: list[subprocess.Popen[str]] = []

    def finish(p: subprocess.Popen[str]) -> str:
        return p.communicate(timeout=600)[0]

    try:
        with dg.DagsterInstance.from_config(str(home)):  # the instance's schema, made once before the servers
            pass
        redis.start()
        webserver.start()  # its code server loads while the workers start
        wait_port(port, 30, redis.alive)
        for name in ("A", "B"):
            workers[name] = _worker(name, tmp_path, machine_env(shared, tmp_path / f"state-{name}"), code, wait=False)
        for name, w in workers.items():
            _ready(name, w)
        wait_for_location(webserver, "lineage_defs", 180)

        # 1. a 4-partition backfill launched on the webserver; the daemon's backfill daemon makes it 4
        # runs (one partition each), its run queue starts them, each run's one step goes to the workers
        start = time.monotonic()
        launch = subprocess.run([LINEAGE_DEFS, "backfill", f"ducklake://main/orders_{tag}", "--from", DAYS[0], "--to", DAYS[-1], "--url", webserver.url],
                                cwd=tmp_path, env=machine_env({}, tmp_path / "state-cli"), capture_output=True, text=True, timeout=120)  # fmt: skip
        assert launch.returncode == 0 and f"{N} partitions of ducklake://main/orders_{tag}" in launch.stdout, launch.stdout + launch.stderr
        backfill_id = launch.stdout.split()[1].rstrip(":")
        daemon.start()  # after the launch: its backfill daemon's first pass (then one every 30 s) sees the backfill

        with dg.DagsterInstance.from_config(str(home)) as instance:

            def finished() -> list[Any] | None:
                runs = instance.get_run_records(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
                return runs if len(runs) == N and all(r.dagster_run.is_finished for r in runs) else None

            def logs() -> str:
                return daemon.log_tail(4000) + "".join(_log(w)[-2000:] for w in workers.values())

            runs = wait_for(f"the backfill's {N} runs to finish", finished, 900, logs, 1.0)
            backfill = time.monotonic() - start
            assert all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in runs), [(r.dagster_run.tags.get("dagster/partition"), r.dagster_run.status) for r in runs]
            assert sorted(r.dagster_run.tags.get("dagster/partition") for r in runs) == DAYS  # one run per partition
            steps = [len(instance.all_logs(r.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)) for r in runs]
            assert steps == [1] * N, steps
            assert instance.get_materialized_partitions(dg.AssetKey(["ducklake", "main", f"orders_{tag}"])) == set(DAYS)
        daemon.stop()
        webserver.stop()
        done = {n: _log(w).count("succeeded in") for n, w in workers.items()}
        assert sum(done.values()) == N and all(done.values()), (done, backfill)
        with Session(settings, skip=frozenset({"duckdb://warehouse"})) as s:
            rows = s.conn.execute(f"SELECT count(*), count(DISTINCT _partition), count(DISTINCT (id, day)) FROM lake.main.orders_{tag}").fetchall()
        assert rows == [(N * 50, N, N * 50)]

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
        (root / "shop" / "orders.py").write_text(CHANGED.format(tag=tag, meet=str(meet)))
        workers["C"] = _worker("C", tmp_path, machine_env(shared, tmp_path / "state-C"), code)
        drivers = [_drive(tmp_path, run_env, code, "run-change", "orders", [DAYS[-1]])]
        out = finish(drivers[0])
        assert "FAILED" in out, out[-4000:]
        assert "received" in _log(workers["C"])
        with dg.DagsterInstance.from_config(str(home)) as instance:
            run = instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": DAYS[-1]}, job_name="orders", statuses=[dg.DagsterRunStatus.FAILURE]))
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
        daemon.stop()
        if webserver.alive():
            webserver.stop()
        for w in workers.values():
            w.stop()
        redis.stop()

    # no process read another's disk: each state dir holds its caches and its own schema copies only
    for d in sorted(tmp_path.glob("state-*")):
        assert all(f.startswith(("cache/", "schemas/")) for f in files_under(d)), (d.name, files_under(d))
    print(f"backfill of {N} partitions ({N} runs from dagster-daemon, {AT_ONCE} at a time) over 2 workers: {backfill:.1f}s from the launch, steps per worker {done}")


# The posts' step also hashes a few million values, long enough to be killed in the middle of (the
# messages come after the kill: their step is never killed, and does no such work).
SLOW = "(SELECT count(DISTINCT md5(CAST(range AS VARCHAR))) FROM range(4000000))"
HOOK = f"""\
-- pipeline
-- on webhook name=posts
-- materialize ducklake://main/posts append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n, {SLOW} AS work FROM _events
"""
KAFKA = """\
-- pipeline
-- on kafka topic=clicks
-- materialize ducklake://main/clicks append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
"""
SECRET = "s3cret-posts"
WORKSPACE = """\
load_from:
  - python_module:
      module_name: lineage_defs.definitions
      attribute: defs
      location_name: lineage_defs
"""


def _post(url: str, n: int) -> int:
    body = json.dumps({"n": n}).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    req = urllib.request.Request(f"{url}/hooks/posts", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "X-Lineage-Signature": sig, "Idempotency-Key": f"post-{n}"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=30) as resp:
        return int(resp.status)


def test_webhook_posts_and_kafka_messages_run_on_celery_workers_once_across_a_worker_kill(tmp_path: Path, pg_dsn: str, s3_server: Any) -> None:
    """The trigger side of the setup: a webhook receiver, a real ``dagster-daemon`` (sensors, code server,
    run workers) and two Celery workers, each with its own empty state dir; the event store on PostgreSQL
    (``LINEAGE_EVENTS_DSN``). The worker running a batch's step is SIGKILLed (process group) mid-step:
    N posts + M messages are exactly N + M rows, and no state dir holds anything but caches."""
    import dagster as dg

    from lineage_defs.run.substrates import Session
    from lineage_defs.settings import LineageSettings

    tag = uuid.uuid4().hex[:8]
    home = dagster_home(tmp_path / "dagster_home", pg_dsn, f"dagster_{tag}")
    lake_dsn = create_database(pg_dsn, f"lake_{tag}")
    events_dsn = create_database(pg_dsn, f"events_{tag}")
    root = tmp_path / "pipelines"
    (root / "hooks").mkdir(parents=True)
    (root / "hooks" / "posts.sql").write_text(HOOK)
    (root / "kafka").mkdir(parents=True)
    (root / "kafka" / "clicks.sql").write_text(KAFKA)
    code = tmp_path / "code"
    code.mkdir()
    (tmp_path / "workspace.yaml").write_text(WORKSPACE)
    port, broker, backend = _celery_config(code, 15)
    kafka = Tansu(tmp_path)
    shared = {
        "LINEAGE_PIPELINES_DIR": str(root),
        **lake_env(lake_dsn, s3_server, f"lake-{tag}"),
        "LINEAGE_CELERY_BROKER_URL": broker,
        "LINEAGE_CELERY_BACKEND_URL": backend,
        "LINEAGE_EVENTS_DSN": events_dsn,
        "LINEAGE_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "LINEAGE_WEBHOOK_SECRET_POSTS": SECRET,
    }
    n_posts, n_messages = 12, 150
    redis = Supervised([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], tmp_path, {}, tmp_path / "redis.log")
    daemon_env = machine_env(shared, tmp_path / "state-daemon", DAGSTER_HOME=str(home), PYTHONPATH=str(code), LINEAGE_SENSOR_INTERVAL="1")
    daemon = Supervised([str(Path(DAGSTER).with_name("dagster-daemon")), "run", "-w", str(tmp_path / "workspace.yaml")], tmp_path, daemon_env, tmp_path / "daemon.log")
    (tmp_path / "state-receiver").mkdir()
    receiver = Receiver(tmp_path, root, tmp_path / "state-receiver", shared)
    workers: dict[str, Supervised] = {}
    with dg.DagsterInstance.from_config(str(home)) as instance:  # the instance's schema, made once before the daemon
        try:
            redis.start()
            kafka.start()
            kafka.create_topic("clicks", partitions=2)
            wait_port(port, 30, redis.alive)
            receiver.start()
            for name in ("A", "B"):  # both start at once: the suite pays one worker startup
                workers[name] = _worker(name, tmp_path, machine_env(shared, tmp_path / f"state-{name}"), code, wait=False)
            for name, w in workers.items():
                _ready(name, w)
            begin = time.monotonic()
            assert all(_post(receiver.url, i) == 202 for i in range(n_posts))
            daemon.start()

            def busy() -> str | None:
                """The worker in the middle of the posts' step: its run logged STEP_START, the worker has not finished."""
                started = [r for r in instance.get_run_records() if instance.get_records_for_run(r.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_START).records]
                for name, w in workers.items():
                    log = _log(w)
                    if started and log.count("received") > log.count("succeeded in"):
                        return name
                return None

            def logs() -> str:
                return daemon.log_tail(4000) + "".join(_log(w)[-2000:] for w in workers.values())

            victim = wait_for("a batch's step on a worker", busy, 180, logs, 0.1)
            time.sleep(0.5)  # inside the step's query
            workers[victim].crash()
            survivor = next(n for n in workers if n != victim)
            # the messages come after the kill: the posts' step was the only one a worker could be running
            kafka.produce("clicks", [{"n": i} for i in range(n_messages)], key=lambda v: str(v["n"]))

            def rows(table: str) -> list[tuple[Any, ...]]:
                settings = LineageSettings.from_env({**shared, "LINEAGE_STATE_DIR": str(tmp_path / "check")})
                with Session(settings, skip=frozenset({"duckdb://warehouse"})) as s:
                    known = s.conn.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = 'lake' AND table_name = $1", [table]).fetchone()
                    if not known or not known[0]:
                        return []
                    return list(s.conn.execute(f"SELECT count(*), count(DISTINCT n), min(n), max(n) FROM lake.main.{table}").fetchall())

            def settled() -> bool:
                sensor_runs = instance.get_run_records()
                return bool(sensor_runs) and all(r.dagster_run.is_finished for r in sensor_runs) and bool(rows("posts")) and bool(rows("clicks")) and (
                    rows("posts")[0][0] >= n_posts and rows("clicks")[0][0] >= n_messages
                )

            wait_for(f"{n_posts} + {n_messages} rows and every run finished", settled, 240, logs, 1.0)
            assert rows("posts") == [(n_posts, n_posts, 0, n_posts - 1)]
            assert rows("clicks") == [(n_messages, n_messages, 0, n_messages - 1)]
            records = instance.get_run_records()
            assert records and all(r.dagster_run.status == dg.DagsterRunStatus.SUCCESS for r in records), [(r.dagster_run.job_name, r.dagster_run.status) for r in records]
            starts = {r.dagster_run.run_id: len(instance.all_logs(r.dagster_run.run_id, of_type=dg.DagsterEventType.STEP_START)) for r in records}
            assert max(starts.values()) >= 2, ("the killed step ran again inside its run", starts)
            assert "succeeded in" in _log(workers[survivor])
            took = time.monotonic() - begin
        finally:
            daemon.stop()
            for w in workers.values():
                w.stop()
            receiver.stop()
            kafka.stop()
            redis.stop()

    # nothing on local disk but caches (and a worker's own schema copies, read only without an instance):
    # no events.sqlite, no webhook inbox, no lake or warehouse file in any state dir
    for d in sorted(tmp_path.glob("state-*")):
        assert all(f.startswith(("cache/", "schemas/")) for f in files_under(d)), (d.name, files_under(d))
    print(f"{n_posts} posts + {n_messages} messages over 2 workers, one killed: {len(records)} runs, step starts {sorted(starts.values())}, {took:.1f}s from the first post")
