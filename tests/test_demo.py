"""`lineage-defs demo`: the instance set up once, refusals with their fix, the sender's payloads and signature.

The whole demo running (UI, broker, receiver; send; stop) is the walkthrough's
(`tests/test_demo_walkthrough.py`); these are the parts that need no server.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import with_example_parse
from lineage_defs.demo.instance import check_runs_db, prepare_instance
from lineage_defs.demo.send import order_events, payment, signed_request
from lineage_defs.demo.state import Credential, credentials, load_running
from lineage_defs.errors import LineageDefsError

REPO = Path(__file__).resolve().parents[1]


def fresh_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def test_the_instance_is_set_up_by_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SQLite storage of the shipped dagster.yaml exists, with one alembic version, before anything else starts."""
    home = fresh_home(tmp_path)
    monkeypatch.setenv("DAGSTER_HOME", str(home))  # the shipped event log's base_dir defaults to it
    prepare_instance(home)
    for db in ("history/runs.db", "storage/index.db", "schedules/schedules.db"):
        assert (home / db).exists(), db
    with sqlite3.connect(home / "history" / "runs.db") as conn:
        assert len(conn.execute("SELECT version_num FROM alembic_version").fetchall()) == 1
    prepare_instance(home)  # a second start finds it in place


def test_a_run_storage_created_twice_at_once_is_refused_with_the_fix(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "history").mkdir(parents=True)
    with sqlite3.connect(home / "history" / "runs.db") as conn:  # what the race leaves: two heads
        conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        conn.executemany("INSERT INTO alembic_version VALUES (?)", [("29b539ebc72a",), ("7e2f3204cf8e",)])
    with pytest.raises(LineageDefsError, match="2 alembic versions") as e:
        check_runs_db(home)
    assert e.value.fix and "make clean" in e.value.fix


def demo_cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("LINEAGE_", "DAGSTER_"))}
    base.update(LINEAGE_PIPELINES_DIR=str(REPO / "examples" / "pipelines"), LINEAGE_STATE_DIR=str(with_example_parse(tmp_path / "state")), **env)
    return subprocess.run([str(Path(sys.executable).with_name("lineage-defs")), "demo", *args], cwd=REPO, env=base, capture_output=True, text=True, timeout=300)


def test_demo_up_refuses_a_port_in_use_and_says_how_to_pick_another(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = demo_cli(tmp_path, "up", "--port", "0", "--kafka-port", str(port), "--webhook-port", "0", "--email-port", "0", DAGSTER_HOME=str(fresh_home(tmp_path)))
    assert out.returncode == 1, out.stderr
    assert f"port {port} (Kafka) is in use on 127.0.0.1 — stop what uses it, or pick another: make demo KAFKA_PORT=<port>" in out.stderr
    assert load_running(tmp_path / "state") is None  # nothing was started


def test_demo_up_needs_dagster_home(tmp_path: Path) -> None:
    out = demo_cli(tmp_path, "up")
    assert out.returncode == 1 and "DAGSTER_HOME is not set" in out.stderr and "make demo sets it" in out.stderr


def test_send_and_stop_without_a_running_demo(tmp_path: Path) -> None:
    sent = demo_cli(tmp_path, "send", "webhook")
    assert sent.returncode == 1 and "no demo is running" in sent.stderr and "make demo" in sent.stderr
    stopped = demo_cli(tmp_path, "stop")
    assert stopped.returncode == 0 and "no demo is running" in stopped.stderr


def test_the_payloads_have_the_example_s_shape() -> None:
    events = order_events("2025-01-02", 5)
    assert [e["event_type"] for e in events] == ["placed", "paid", "shipped", "delivered", "placed"]
    assert [e["order_id"] for e in events] == [202501020001] * 4 + [202501020002]  # the ids raw_orders.sh gives
    p = payment("2025-01-03", 2)
    assert p["order_id"] == 202501030002 and p["paid_at"] == "2025-01-03T10:15:00Z" and p["payment_id"].startswith("demo-")


def test_a_signed_request_carries_the_token_and_the_body_s_hmac() -> None:
    body = json.dumps(payment("2025-01-02", 1)).encode()
    req = signed_request("http://127.0.0.1:1/hooks/payments", body, Credential("tok", "sec"), "key-1")
    assert req.get_header("Authorization") == "Bearer tok" and req.get_header("Idempotency-key") == "key-1"
    assert req.get_header("X-lineage-signature") == "sha256=" + hmac.new(b"sec", body, hashlib.sha256).hexdigest()


def test_credentials_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = credentials(tmp_path, ["payments"], {})["payments"]
    again = credentials(tmp_path, ["payments", "other"], {})
    assert again["payments"] == first and again["other"] != first and len(first.token) >= 24
    assert (tmp_path / "demo" / "credentials.json").stat().st_mode & 0o077 == 0
    chosen = credentials(tmp_path, ["payments"], {"LINEAGE_WEBHOOK_TOKEN_PAYMENTS": "mine"})["payments"]
    assert chosen.token == "mine" and chosen.secret == first.secret  # the environment's wins


def test_the_example_s_postgres_sensor_says_what_to_set_on_the_embedded_default(tmp_path: Path) -> None:
    from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

    from lineage_defs import LineageSettings, build_definitions

    defs = build_definitions(REPO / "examples" / "pipelines", settings=LineageSettings(state_dir=str(with_example_parse(tmp_path / "state"))))
    sensor = next(s for s in defs.sensors if s.name == "shop__order_changes__postgres_public_orders")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests
    assert "no PostgreSQL for connection 'default': set LINEAGE_PG_DSN (a libpq DSN of a server with wal_level=logical)" in (result.skip_message or "")
    mail = next(s for s in defs.sensors if s.name == "shop__supplier_invoices__email_invoices")
    assert mail.default_status == DefaultSensorStatus.RUNNING and "lineage-defs email serve" in (mail.description or "")


# `dagster dev`'s output as it prints it (colour codes included), cut down from a demo's terminal
DEV_OUTPUT = """\
\x1b[32m2026-12-06 01:46:45 +0000\x1b[0m - dagster.daemon.EventLogConsumerDaemon - \x1b[34mWARNING\x1b[0m - No cursor for event type DagsterEventType.RUN_FAILURE, ignoring older events
\x1b[32m2026-12-06 01:46:47 +0000\x1b[0m - dagster.daemon.SensorDaemon - \x1b[34mINFO\x1b[0m - Sensor shop__payments__webhook_payments skipped: hook 'payments': no new batch (0 events stored, 0 in batches)
2026-12-06 01:47:05 +0000 - dagster - INFO - __repository__ - lineage_cascade - Backfill iteration summary:
**Assets materialized since last iteration:**
None
2026-12-06 01:47:22 +0000 - dagster - DEBUG - __ASSET_JOB - 13c73667 - 14713 - shop__payments - STEP_START - Started execution of step "shop__payments".
Traceback (most recent call last):
  File "/repo/examples/pipelines/shop/payments.py", line 48, in <module>
2026-12-06 01:47:23 +0000 - dagster - ERROR - __ASSET_JOB - 13c73667 - 14713 - RUN_FAILURE - Execution of run for "__ASSET_JOB" failed. Steps failed: ['shop__payments'].

dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op "shop__payments":

Stack Trace:
  File "/venv/dagster/_core/execution/plan/execute_plan.py", line 243, in dagster_event_sequence_for_step
    yield from check.generator(step_events)

The above exception was caused by the following exception:
lineage_defs.run.inputs.InputMissing: shop/payments.py:48:1: input not there yet: ducklake://main/orders — materialize ducklake://main/orders first
    runtime.write(frame)
    ^^^^^^^^^^^^^^^^^^^^

Stack Trace:
  File "/repo/lineage_defs/assets/execute.py", line 287, in pipes
    raise self._failure(json.loads(error_file.read_text()), window) from e

2026-12-06 01:47:24 +0000 - dagster.daemon.SensorDaemon - INFO - Checking for new runs for sensor: shop__order_events__kafka_shop_order_events
2026-12-06 01:47:25 +0000 - dagster - WARNING - __ASSET_JOB - 2a9c - daily_revenue - partition 2025-01-03 came out empty
"""

SHOWN = [
    "2026-12-06 01:47:23 +0000 - dagster - ERROR - __ASSET_JOB - 13c73667 - 14713 - RUN_FAILURE - Execution of run for \"__ASSET_JOB\" failed. Steps failed: ['shop__payments'].",
    'dagster._core.errors.DagsterExecutionStepExecutionError: Error occurred while executing op "shop__payments":',
    "    (stack traces: /state/demo/dagster.log)",
    "The above exception was caused by the following exception:",
    "lineage_defs.run.inputs.InputMissing: shop/payments.py:48:1: input not there yet: ducklake://main/orders — materialize ducklake://main/orders first",
    "    runtime.write(frame)",
    "    ^^^^^^^^^^^^^^^^^^^^",
    "2026-12-06 01:47:25 +0000 - dagster - WARNING - __ASSET_JOB - 2a9c - daily_revenue - partition 2025-01-03 came out empty",
]


def test_the_terminal_shows_warnings_and_errors_with_their_causes_but_not_their_stack_traces() -> None:
    """Sensor ticks, step events, daemon summaries, the start-up warning and stack traces stay in the log file."""
    from lineage_defs.demo.console import Console

    console = Console("/state/demo/dagster.log")
    shown = [s for line in DEV_OUTPUT.splitlines(keepends=True) for s in console.feed(line)]
    assert shown == SHOWN


def test_what_dagster_dev_prints_before_its_first_record_shows() -> None:
    """`dagster dev` refusing to start prints no log record: that reaches the terminal."""
    from lineage_defs.demo.console import Console

    console = Console("/x.log")
    assert console.feed("Usage: dagster dev [OPTIONS]\n") == ["Usage: dagster dev [OPTIONS]"]
    assert console.feed("Error: Invalid value for '--workspace' / '-w': File 'nope.yaml' does not exist.\n") != []


def test_dagster_dev_s_whole_output_goes_to_the_log_and_what_needs_a_person_to_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's service copies every line (without colour codes) to its log file and shows the console's choice."""
    from lineage_defs.demo.console import Console
    from lineage_defs.demo.up import Service

    log = tmp_path / "dagster.log"
    argv = [sys.executable, "-c", f"import sys; sys.stdout.write({DEV_OUTPUT!r})"]
    service = Service("ui", argv, dict(os.environ), log, grace=5, console=Console(str(log)))
    service.start(tmp_path)
    service.proc.wait(timeout=60)
    service.stop()
    assert log.read_text() == DEV_OUTPUT.replace("\x1b[32m", "").replace("\x1b[34m", "").replace("\x1b[0m", "")
    assert capsys.readouterr().out.splitlines() == [s.replace("/state/demo/dagster.log", str(log)) for s in SHOWN]


def test_the_graph_link_opens_the_lineage_page_with_every_group_expanded() -> None:
    from lineage_defs.demo.up import graph_url

    assert graph_url("http://127.0.0.1:3000", ["analytics", "shop"]) == "http://127.0.0.1:3000/asset-groups?expanded=global@global:analytics,global@global:shop"
    assert graph_url("http://127.0.0.1:3000", []) == "http://127.0.0.1:3000/asset-groups"
