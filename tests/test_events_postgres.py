"""The event store on PostgreSQL (``LINEAGE_EVENTS_DSN``) end to end: the webhook and the e-mail receivers →
sensors → `append` rows.

Each receiver and the daemon get their own state dir, so the only place the
posts and mails can travel through is the PostgreSQL store: rows appear
exactly once across repeated Idempotency-Keys / Message-IDs and a SIGKILL of
each receiver, and no state dir ever holds an event store file.
"""

from __future__ import annotations

import concurrent.futures
import json
import smtplib
import os
import subprocess
import sys
import urllib.request
import uuid
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from lineage_defs.events.store import EventStore
from services import Daemon, EmailReceiver, Receiver, wait_for
from triggers_support import finished, table_rows, write_steps

pytestmark = pytest.mark.daemon

ROWS = "duckdb://warehouse/pg_rows"
MAIL_ROWS = "duckdb://warehouse/pg_mail_rows"
TOKEN = "t0ken-pg"
STEPS = {
    "hooks/pg_rows.sql": f"""-- pipeline
-- on webhook name=orders
-- materialize {ROWS} append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
""",
    "hooks/pg_mail_rows.sql": f"""-- pipeline
-- on email name=invoices
-- materialize {MAIL_ROWS} append
SELECT CAST(trim(json_extract_string(value, '$.text')) AS BIGINT) AS n FROM _events
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


def send_mails(port: int, ids: range) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as s:
        for i in ids:
            m = EmailMessage()
            m["From"], m["To"], m["Subject"] = "bot@shop.example", "invoices@shop.example", f"invoice {i}"
            m["Message-ID"] = f"<invoice-{i}@shop.example>"
            m.set_content(f"{i}\n")
            s.send_message(m)


def test_posts_and_mails_reach_append_rows_through_the_postgres_store(tmp_path: Path, pg_dsn: str) -> None:
    dsn = fresh_database(pg_dsn)
    pipelines = write_steps(tmp_path / "pipelines", STEPS)
    receiver_state, mail_state, daemon_state = tmp_path / "receiver-state", tmp_path / "mail-state", tmp_path / "daemon-state"
    env = {"LINEAGE_EVENTS_DSN": dsn, "LINEAGE_WEBHOOK_TOKEN_ORDERS": TOKEN}
    receiver = Receiver(tmp_path, pipelines, receiver_state, env)
    mail = EmailReceiver(tmp_path, pipelines, mail_state, {"LINEAGE_EVENTS_DSN": dsn})
    daemon = Daemon(tmp_path, pipelines, daemon_state, {"LINEAGE_EVENTS_DSN": dsn})
    try:
        receiver.start()
        mail.start()
        send_mails(mail.port, range(30))
        mail.crash()  # what it answered 250 for is committed in PostgreSQL
        mail.start()
        send_mails(mail.port, range(20, 40))  # the last ten again (a sender that missed our 250), then ten more
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
        wait_for("40 mail rows", lambda: len(table_rows(daemon_state, MAIL_ROWS)) >= 40, 180, daemon.log_tail)
        instance = daemon.instance()
        wait_for("all runs finished", lambda: finished(instance), 120, daemon.log_tail)
        assert sorted(r[0] for r in table_rows(daemon_state, ROWS, "n")) == list(range(90))
        assert sorted(r[0] for r in table_rows(daemon_state, MAIL_ROWS, "n")) == list(range(40))

        def settled() -> bool:  # the sensor marks a batch done on the tick after its run succeeded
            with EventStore(dsn) as store:
                return all(store.counts(stream)["batches_open"] == 0 for stream in ("webhook:orders", "email:invoices"))

        wait_for("the sensor to settle every batch", settled, 60, daemon.log_tail)
    finally:
        daemon.stop()
        mail.stop()
        receiver.stop()
    with EventStore(dsn) as store:
        counts, mails = store.counts("webhook:orders"), store.counts("email:invoices")
    assert counts["events"] == 90 and counts["batched"] == 90 and counts["batches_open"] == 0
    assert mails["events"] == 40 and mails["batched"] == 40 and mails["batches_open"] == 0
    for state in (receiver_state, mail_state, daemon_state):
        assert not (state / "events").exists(), f"{state} holds an event store file"
    listing = subprocess.run(
        [str(Path(sys.executable).parent / "lineage-defs"), "events"],
        env={**os.environ, "LINEAGE_PIPELINES_DIR": str(pipelines), "LINEAGE_STATE_DIR": str(tmp_path / "cli-state"), "LINEAGE_EVENTS_DSN": dsn},
        capture_output=True, text=True, timeout=120,
    )
    assert "webhook:orders: 90 events stored, 90 batched, 0 rejected" in listing.stdout, listing.stdout + listing.stderr
    assert "email:invoices: 40 events stored, 40 batched, 0 rejected" in listing.stdout, listing.stdout
    assert dsn not in listing.stdout + listing.stderr  # the DSN may hold a password: never printed
