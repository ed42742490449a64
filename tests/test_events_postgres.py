"""The event store on PostgreSQL (``LINEAGE_EVENTS_DSN``) end to end: webhook receiver → sensor → `append` rows.

The receiver and the daemon each get their own state dir, so the only place
the posts can travel through is the PostgreSQL store: rows appear exactly
once across repeated Idempotency-Keys and a receiver SIGKILL, and neither
state dir ever holds an event store file.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.events.store import EventStore
from services import Daemon, Receiver, wait_for
from triggers_support import finished, table_rows, write_steps

pytestmark = pytest.mark.slow

ROWS = "duckdb://warehouse/pg_rows"
TOKEN = "t0ken-pg"
STEPS = {
    "hooks/pg_rows.sql": f"""-- pipeline
-- on webhook name=orders
-- materialize {ROWS} append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
""",
}


def fresh_database(pg_dsn: str) -> str:
    import psycopg

    name = f"events_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return pg_dsn.replace("dbname=lineage_test", f"dbname={name}")


def post(url: str, n: int) -> tuple[int, str]:
    body = json.dumps({"n": n}).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", "Idempotency-Key": f"order-{n}", "Authorization": f"Bearer {TOKEN}"}, method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 202
        return n, json.loads(resp.read())["id"]


def test_webhook_posts_reach_append_rows_through_the_postgres_store(tmp_path: Path, pg_dsn: str) -> None:
    dsn = fresh_database(pg_dsn)
    pipelines = write_steps(tmp_path / "pipelines", STEPS)
    receiver_state, daemon_state = tmp_path / "receiver-state", tmp_path / "daemon-state"
    env = {"LINEAGE_EVENTS_DSN": dsn, "LINEAGE_WEBHOOK_TOKEN_ORDERS": TOKEN}
    receiver = Receiver(tmp_path, pipelines, receiver_state, env)
    daemon = Daemon(tmp_path, pipelines, daemon_state, {"LINEAGE_EVENTS_DSN": dsn})
    try:
        receiver.start()
        url = f"{receiver.url}/hooks/orders"
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = dict(pool.map(lambda n: post(url, n), range(60)))
            repeat = dict(pool.map(lambda n: post(url, n), range(0, 60, 4)))
        assert all(repeat[n] == ids[n] for n in repeat) and len(set(ids.values())) == 60
        receiver.kill()  # what it answered 202 for is committed in PostgreSQL
        receiver.start()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            more = dict(pool.map(lambda n: post(url, n), range(50, 90)))
        assert all(more[n] == ids[n] for n in range(50, 60))
        daemon.start()
        wait_for("90 rows", lambda: len(table_rows(daemon_state, ROWS)) >= 90, 180, daemon.log_tail)
        instance = daemon.instance()
        wait_for("all runs finished", lambda: finished(instance), 120, daemon.log_tail)
        assert sorted(r[0] for r in table_rows(daemon_state, ROWS, "n")) == list(range(90))

        def settled() -> bool:  # the sensor marks a batch done on the tick after its run succeeded
            with EventStore(dsn) as store:
                return bool(store.counts("webhook:orders")["batches_open"] == 0)

        wait_for("the sensor to settle every batch", settled, 60, daemon.log_tail)
    finally:
        daemon.stop()
        receiver.stop()
    with EventStore(dsn) as store:
        counts = store.counts("webhook:orders")
    assert counts["events"] == 90 and counts["batched"] == 90 and counts["batches_open"] == 0
    for state in (receiver_state, daemon_state):
        assert not (state / "events").exists(), f"{state} holds an event store file"
    listing = subprocess.run(
        [str(Path(sys.executable).parent / "lineage-defs"), "events"],
        env={**os.environ, "LINEAGE_PIPELINES_DIR": str(pipelines), "LINEAGE_STATE_DIR": str(tmp_path / "cli-state"), "LINEAGE_EVENTS_DSN": dsn},
        capture_output=True, text=True, timeout=120,
    )
    assert "webhook:orders: 90 events stored, 90 batched, 0 rejected" in listing.stdout, listing.stdout + listing.stderr
    assert dsn not in listing.stdout + listing.stderr  # the DSN may hold a password: never printed
