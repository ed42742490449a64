"""Real services for the tests, started by the suite itself: PostgreSQL 15 and an S3 server (moto).

Nothing is mocked and nothing is skipped: a missing PostgreSQL binary is a failure.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.settings import LineageSettings
from lineage_defs.run.substrates import Session

PG_BIN = Path("/usr/lib/postgresql/15/bin")
# Every test names its own pipelines folder; Definitions of a user's shell (`LINEAGE_DEFINITIONS`,
# which `make demo` sets) would be merged into each code location the suite starts.
os.environ.pop("LINEAGE_DEFINITIONS", None)
S3_KEY_ID = "lineage-test-key"
S3_SECRET = "lineage-test-secret"
S3_REGION = "us-east-1"


def flaky_step(marker: Path, uri: str, retries: int) -> str:
    """A Python step (``# retry <retries>``, writing ``uri``) whose first attempt fails and whose next writes its
    attempt number; ``marker`` counts the attempts across the step's processes."""
    return textwrap.dedent(f"""
        # pipeline
        # retry {retries}
        # materialize {uri}
        from pathlib import Path
        import pandas as pd
        from lineage_defs import runtime
        m = Path({str(marker)!r})
        n = int(m.read_text()) + 1 if m.exists() else 1
        m.write_text(str(n))
        if n < 2:
            raise SystemExit("transient failure")
        runtime.write(pd.DataFrame({{"attempt": [n]}}))
    """).lstrip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*cmd: str) -> list[str]:
    """initdb refuses to run as root: drop to the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A throwaway PostgreSQL 15 cluster on 127.0.0.1 (wal_level=logical) with one empty database."""
    import psycopg

    # Not under pytest's tmp dir: that one is 0700 root and the postgres user must enter it.
    root = Path(tempfile.mkdtemp(prefix="lineage-pg-"))
    data = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    port = free_port()
    subprocess.run(_as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "--no-sync"),
                   check=True, capture_output=True)
    # wal_level=logical: `on postgres` reads changes through logical replication slots
    opts = f"-c listen_addresses=127.0.0.1 -p {port} -c fsync=off -c full_page_writes=off -c unix_socket_directories={root} -c wal_level=logical"
    subprocess.run(_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(root / "log"), "-w", "start"),
                   check=True, capture_output=True)
    try:
        with psycopg.connect(f"host=127.0.0.1 port={port} dbname=postgres user=postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE lineage_test")
        yield f"host=127.0.0.1 port={port} dbname=lineage_test user=postgres"
    finally:
        pid_file = data / "postmaster.pid"
        pid = int(pid_file.read_text().split()[0]) if pid_file.exists() else None
        subprocess.run(_as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "stop", "-m", "immediate"), capture_output=True)
        if pid is not None and pid_file.exists():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            time.sleep(0.2)
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class S3Server:
    endpoint_url: str
    bucket: str

    def settings(self) -> dict[str, Any]:
        """LineageSettings keywords pointing object storage at this server."""
        return {
            "s3_endpoint_url": self.endpoint_url,
            "s3_bucket": self.bucket,
            "s3_access_key_id": S3_KEY_ID,
            "s3_secret_access_key": S3_SECRET,
            "s3_region": S3_REGION,
        }

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=S3_KEY_ID,
            aws_secret_access_key=S3_SECRET, region_name=S3_REGION,
        )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server on a free port, with one bucket."""
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        s3 = S3Server(f"http://127.0.0.1:{port}", "lineage-test")
        s3.client().create_bucket(Bucket=s3.bucket)
        yield s3
    finally:
        server.stop()


# -- `make demo` as a fixture: `lineage-defs demo up` on the bundled example ----------------------
REPO = Path(__file__).resolve().parent.parent
DEMO_LOCATION = "lineage_defs"  # workspace.yaml's location_name

# `make test` and `make check` export the demo's DAGSTER_HOME and LINEAGE_STATE_DIR (the repository's
# dagster_home and .lineage, for `make demo`). What a test runs with them (`lineage-defs events` opens the
# instance of DAGSTER_HOME; a load from the environment writes its caches and dbt profile to the state
# dir) must not write the demo's files, nor create them at the same time as another test process (SQLite
# tables and their alembic version made twice; one DuckDB writer): each test process has a Dagster home
# (with the demo's dagster.yaml) and a state dir of its own. A test that needs its own still makes one.
def _own(variable: str, demo: Path, prefix: str) -> Path | None:
    if not os.environ.get(variable) or Path(os.environ[variable]).resolve() != demo:
        return None
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    os.environ[variable] = str(path)
    return path


if (_home := _own("DAGSTER_HOME", REPO / "dagster_home", "lineage-tests-dagster-home-")) is not None:
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", _home / "dagster.yaml")
_own("LINEAGE_STATE_DIR", REPO / ".lineage", "lineage-tests-state-")


# The example's dbt project, parsed once per test process: a fresh state dir of the example starts from
# its parse cache (`dbt parse` is ~5 s of CPU, and a dozen modules load the example on state dirs of
# their own). The cache entry does not depend on the state dir (lineage_defs.dbt.manifest.project_hash);
# settings that change the generated profile (threads, another lake) miss it and parse as before.
_example_parse: list[Path] = []
PARSE_CACHE = ("cache", "dbt")  # under a state dir (a folder, not the dbt command tests/test_tiers.py looks for)


def with_example_parse(state: Path) -> Path:
    """``state``, holding this test process's parse of the example's dbt project."""
    if not _example_parse:
        from lineage_defs.project import load_project

        template = Path(tempfile.mkdtemp(prefix="lineage-example-parse-"))
        atexit.register(shutil.rmtree, template, True)
        example = REPO / "examples" / "pipelines"
        load_project(example, LineageSettings(pipelines_dir=str(example), state_dir=str(template)))
        _example_parse.append(template.joinpath(*PARSE_CACHE))
    shutil.copytree(_example_parse[0], state.joinpath(*PARSE_CACHE), dirs_exist_ok=True)
    return state


def start_demo(root: Path, make: bool = False) -> Any:
    """What `make demo` starts — `lineage-defs demo up`: `dagster dev -w workspace.yaml` (UI and daemon),
    a Tansu broker with the example's topic and the webhook receiver — from the repo root, with the
    Makefile's environment but a Dagster home, state dir and ports of its own; ready for GraphQL and
    a browser. ``root / "state" / "demo"`` holds what `lineage-defs demo send` reads. With ``make``,
    through `make demo` itself (this Python's venv as the Makefile's, which `make install` finds up
    to date; the Makefile's variables take the environment's values)."""
    from services import wait_for, with_daemon_site
    from webserver import DagsterDev, free_port, wait_for_location

    home = root / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEAGE_", "DAGSTER_"))}
    env.update(
        LINEAGE_PIPELINES_DIR=str(REPO / "examples" / "pipelines"),
        LINEAGE_STATE_DIR=str(with_example_parse(root / "state")),
        DAGSTER_HOME=str(home),
        DAGSTER_EVENT_BATCH_SIZE="1000",  # as the Makefile exports it
        LINEAGE_DEFINITIONS=str(REPO / "examples" / "python_assets.py"),  # the example's hand-written assets, as the Makefile sets them
        PYTHONFAULTHANDLER="1",  # a run worker that crashes in native code leaves its Python stack in dagster.log
    )
    cli = shutil.which("lineage-defs", path=str(Path(sys.executable).parent))
    assert cli, "the lineage-defs CLI is not installed next to this Python"
    port, kafka, hooks, mail = free_port(), free_port(), free_port(), free_port()
    argv = [cli, "demo", "up", "--host", "127.0.0.1", "--port", str(port), "--kafka-port", str(kafka), "--webhook-port", str(hooks), "--email-port", str(mail)]
    if make:
        argv = ["make", "demo", f"VENV={sys.prefix}", "HOST=127.0.0.1", f"PORT={port}", f"KAFKA_PORT={kafka}", f"WEBHOOK_PORT={hooks}", f"EMAIL_PORT={mail}"]
    server = DagsterDev(argv, REPO, with_daemon_site(env), port, root / "demo.log")  # backfill passes every 5 s
    t0 = time.monotonic()
    server.start()
    try:
        wait_for_location(server, DEMO_LOCATION, 300)
        # what the person reads before clicking: `demo: ready` (the cascade sensor has ticked too)
        wait_for("demo: ready", lambda: "demo: ready in" in server.log_path.read_text(errors="replace"), 300, server.log_tail)
    except BaseException:
        stop_demo(server, root)
        raise
    print(f"lineage-defs demo up: ready in {time.monotonic() - t0:.1f}s on port {port}")
    return server


def stop_demo(server: Any, root: Path) -> None:
    """Stop `demo up` as Ctrl-C would (SIGTERM; it stops its services), then check nothing of it is left."""
    import json

    from webserver import live_group_members

    try:
        groups = list(json.loads((root / "state" / "demo" / "running.json").read_text())["groups"].values())
    except (OSError, ValueError, KeyError):
        groups = []
    server.stop(grace=90)
    left = {g: live_group_members(g) for g in [server.pgid, *groups] if live_group_members(g)}
    assert not left, f"processes of the demo survived the teardown: {left}"


@pytest.fixture(scope="session")
def demo_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("demo")


# The shared demo while it runs: stopped after the last test of SHARE_THE_DEMO's modules, not at the
# end of the session (an idle demo's daemon, code servers and webserver took ~120 CPU-s of a `make
# test` that still had ~14 minutes to go on its process).
_shared_demo: list[tuple[Any, Path]] = []


def _stop_shared_demo() -> None:
    while _shared_demo:
        stop_demo(*_shared_demo.pop())


@pytest.fixture(scope="session")
def demo(demo_root: Path) -> Iterator[Any]:
    """The suite's `make demo`, shared by the webserver and browser tests (each uses partitions of its
    own); every process it started is gone once the last of them ran."""
    server = start_demo(demo_root)
    _shared_demo.append((server, demo_root))
    try:
        yield server
    finally:
        _stop_shared_demo()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def make_session(state_dir: Path) -> Iterator[Callable[..., Session]]:
    """``make_session(**settings)`` → a Session on ``state_dir``, closed at teardown.

    A Session holds the state dir's lock: close one before making the next.
    """
    sessions: list[Session] = []

    def make(**settings: Any) -> Session:
        s = Session(LineageSettings(state_dir=str(state_dir), **settings))
        sessions.append(s)
        return s

    yield make
    for s in sessions:
        s.close()


# -- managed-write targets on every substrate ------------------------------------------
SUBSTRATES = ("ducklake", "duckdb", "postgres", "parquet", "s3_parquet")


@dataclass
class WriteTarget:
    """One target of a managed write, with helpers to stage a slice and read the result."""

    session: Session
    substrate: str
    uri: str  # may hold {partition} for per-partition objects

    @property
    def is_object(self) -> bool:
        return self.substrate.endswith("parquet")

    def uri_for(self, partition: str | None) -> str:
        return self.uri.replace("{partition}", partition) if partition is not None else self.uri

    def stage(self, select_sql: str, params: dict[str, Any] | None = None) -> None:
        self.session.conn.execute(f"CREATE OR REPLACE TEMP TABLE slice AS {select_sql}", params)

    def write(self, strategy: str, select_sql: str, audit: Any = None, **kw: Any) -> Any:
        from lineage_defs.run.write import WriteRequest, write

        self.stage(select_sql)
        req = WriteRequest(uri=self.uri_for(kw.get("partition")), strategy=strategy, slice_table="slice", **kw)
        return write(self.session, req, audit)

    def relation(self, partition: str | None = None, suffix: str = "") -> tuple[str, dict[str, Any]]:
        if self.is_object:
            return "read_parquet($path)", {"path": self.session.object_path(self.uri_for(partition))}
        sql = self.session.table_sql(self.uri)
        if suffix:  # the scd2 view beside the table
            head, _, last = sql.rpartition(".")
            sql = f'{head}."{last.strip(chr(34))}{suffix}"'
        return sql, {}

    def rows(self, partition: str | None = None, suffix: str = "", columns: str = "*") -> list[tuple[Any, ...]]:
        rel, params = self.relation(partition, suffix)
        return self.session.conn.execute(f"SELECT {columns} FROM {rel} ORDER BY ALL", params or None).fetchall()

    def columns(self, partition: str | None = None) -> list[tuple[str, str]]:
        rel, params = self.relation(partition)
        cur = self.session.conn.execute(f"SELECT * FROM {rel} LIMIT 0", params or None)
        # DESCRIBE cannot take parameters; the relation's own description can.
        return [(d[0], str(d[1])) for d in cur.description]

    def exists(self, partition: str | None = None) -> bool:
        if not self.is_object:
            u = self.session.table_sql(self.uri).replace('"', "").split(".")
            n = self.session.conn.execute(
                "SELECT count(*) FROM duckdb_tables() WHERE database_name=$1 AND schema_name=$2 AND table_name=$3", u
            ).fetchone()
            return bool(n and n[0])
        path = self.session.object_path(self.uri_for(partition))
        if path.startswith("s3://"):
            return bool(self.session.conn.execute("SELECT count(*) FROM read_blob($1)", [path]).fetchone()[0])  # type: ignore[index]
        return os.path.exists(path)


@pytest.fixture(scope="module")
def shared_sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[tuple[str, Any], ...], Session]]:
    """Sessions reused by a module's write tests (attaching the lake costs more than most writes).

    Targets get unique names, so tests sharing a session never see each other's tables.
    """
    pool: dict[tuple[tuple[str, Any], ...], Session] = {}
    yield pool
    for s in pool.values():
        s.close()


@pytest.fixture
def write_target(
    request: pytest.FixtureRequest,
    make_session: Callable[..., Session],
    shared_sessions: dict[tuple[tuple[str, Any], ...], Session],
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., WriteTarget]:
    """``write_target(substrate, name="t", per_partition=False, fresh=False)`` → a WriteTarget with a fresh name.

    PostgreSQL/S3 are configured (and started) only when a target needs them. Targets
    share their module's Session unless ``fresh=True``: then the Session is the test's
    own, on ``state_dir``, and the test may close it.
    """

    def make(substrate: str, name: str = "t", per_partition: bool = False, fresh: bool = False) -> WriteTarget:
        settings: dict[str, Any] = {}
        if substrate == "postgres":
            settings["postgres_dsn"] = request.getfixturevalue("pg_dsn")
        if substrate == "s3_parquet":
            settings.update(request.getfixturevalue("s3_server").settings())
        if fresh:
            session = make_session(**settings)
        else:
            key = tuple(sorted(settings.items()))
            if key not in shared_sessions:
                state = tmp_path_factory.mktemp("shared-state")
                shared_sessions[key] = Session(LineageSettings(state_dir=str(state), **settings))
            session = shared_sessions[key]
        unique = f"{name}_{uuid.uuid4().hex[:8]}"  # PostgreSQL and the S3 bucket outlive a test
        uri = {
            "ducklake": f"ducklake://main/{unique}",
            "duckdb": f"duckdb://warehouse/{unique}",
            "postgres": f"datatable://crm/{unique}",
        }.get(substrate)
        if uri is None:
            uri = f"s3:///out/{unique}/{{partition}}.parquet" if per_partition else f"s3:///out/{unique}.parquet"
        return WriteTarget(session, substrate, uri)

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test item, so a fixture's teardown knows whether the test failed."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


# -- test processes (`make test` runs pytest-xdist: -n $(TEST_WORKERS), 3 by default, --no-loadscope-reorder) --
# A module's tests stay on one process (its module-scoped services start once); the modules on the
# suite's one `make demo` share a process, so it starts once. The longest modules go first (measured:
# `--durations` of `make test`), every module with a test over ~25 s among them, so the suite ends on
# short modules and neither process is left alone with a long one at the end. (A scheduler of our own
# rather than `--dist loadgroup`: xdist 3.8 marks groups by rewriting node ids, which pytest 9.2 ignores.)
SHARE_THE_DEMO = ("test_demo_webserver", "test_ui_browser")
LONGEST_FIRST = (
    "test_demo_walkthrough", "test_scale_out_celery", *SHARE_THE_DEMO, "test_triggers_exactly_once",
    "test_hooks_daemon", "test_triggers_nats", "test_explorer_browser", "test_dbt_assets", "test_dbt_real", "test_triggers_cascade", "test_triggers_kafka", "test_cli",
    "test_triggers_mqtt", "test_triggers_email", "test_dg", "test_duckdb_io", "test_dbt_cascade",
    "test_triggers_sqs", "test_triggers_plain_instance", "test_schemas_shared", "test_triggers_postgres",
    "test_changed", "test_events_postgres", "test_dbt_source_tests", "test_definitions",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # the shared demo stops after these modules' last test (pytest_runtest_teardown)
        if "demo" in getattr(item, "fixturenames", ()) and item.path.stem not in SHARE_THE_DEMO:
            raise pytest.UsageError(f"{item.nodeid} uses the shared `demo`: add its module to SHARE_THE_DEMO in tests/conftest.py")
    rank = {m: i for i, m in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each module stays together


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After the last test on the shared demo (xdist runs a test once it knows the next one), stop it."""
    try:
        return (yield)
    finally:
        if item.path.stem in SHARE_THE_DEMO and (nextitem is None or nextitem.path.stem not in SHARE_THE_DEMO):
            _stop_shared_demo()


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return "the demo" if Path(module).stem in SHARE_THE_DEMO else module

    return ByModule(config, log)


# -- where the suite's time goes, per module (printed with --durations, as `make test` runs) ---------------
# Each module's test time (setup, call and teardown, summed) and when it ran (seconds from the first
# report to the module's first and last), on which test process: the modules that end last are the
# suite's tail, the ones to move into LONGEST_FIRST.
_modules: dict[str, list[Any]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    worker = getattr(getattr(report, "node", None), "gateway", None)
    entry = _modules.setdefault(module, [0.0, report.start, report.stop, getattr(worker, "id", "-")])
    entry[0] += report.duration
    entry[1], entry[2] = min(entry[1], report.start), max(entry[2], report.stop)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if config.option.durations is None or not _modules:
        return
    t0 = min(e[1] for e in _modules.values())
    terminalreporter.section("time per module (the 25 longest, and when they ran)")
    for module, (total, start, stop, worker) in sorted(_modules.items(), key=lambda kv: -kv[1][0])[:25]:
        terminalreporter.write_line(f"{total:7.1f}s  {start - t0:6.0f}s–{stop - t0:5.0f}s  {worker:4s} {module}")
    last = sorted(_modules.items(), key=lambda kv: -kv[1][2])[:5]
    terminalreporter.write_line("last to end: " + ", ".join(f"{Path(m).stem} ({e[2] - t0:.0f}s)" for m, e in last))
