"""`on email name=<mailbox>`: the annotation, the parsed event, the receiver (`lineage-defs email serve`) fed by
`smtplib`, and the mail → store → runs path under the real `dagster-daemon`.

The receiver runs as its own process on a free port. Its bad-input table: an
unknown mailbox → 550 naming the known ones, a message over
``LINEAGE_EMAIL_MAX_BYTES`` → 552 (declared with SIZE, or only found while
reading DATA), and nothing stored for either; a message that is not a usable
mail is answered 250 and stored rejected with its reason; a resend (same
Message-ID) stores nothing new. The end-to-end: N mails → N rows in an
`append` target; the daemon's whole process group SIGKILLed while M more
arrive (and the receiver SIGKILLed and restarted, the sender resending what
it sent last) → exactly N + M rows.
"""

from __future__ import annotations

import smtplib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, DefaultSensorStatus, build_sensor_context

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.events.store import EventStore
from lineage_defs.parse import parse_header
from lineage_defs.parse.model import Email
from lineage_defs.triggers.email.receiver import Unusable, parse_mail
from services import Daemon, EmailReceiver, wait_for
from triggers_support import finished, runs, skip_reasons, stored, table_rows, write_steps


# -- the annotation -----------------------------------------------------------------------------
def _errors(line: str) -> list[str]:
    _, errors = parse_header("x.sql", f"-- {line}\nSELECT 1\n", "duckdb")
    return [e.headline() for e in errors]


def test_on_email_parses_a_mailbox() -> None:
    header, errors = parse_header("x.sql", "-- on email name=orders.eu partition_from=json:$.date\nSELECT 1\n", "duckdb")
    assert not errors
    (t,) = header.events
    assert t == Email("orders.eu", "json:$.date", t.at) and t.at.line == 1


@pytest.mark.parametrize(
    "line, headline",
    [
        ("on email", "x.sql:1:12: 'on email' needs name= — write on email name=orders (the mailbox: mail to orders@… runs the step)"),
        ("on email name=Orders@shop.example", "x.sql:1:18: bad mailbox 'Orders@shop.example' — write the address's part before @ in lower-case letters, digits, ., - and _ (e.g. name=orders)"),
        ("on email nmae=orders", "x.sql:1:13: unknown option 'nmae' — did you mean 'name'?"),
        ("on email name=orders partition_from=subject", "x.sql:1:40: bad partition_from 'subject' — use timestamp, key, header:<name> or json:$.path"),
        ("on emial name=orders", "x.sql:1:7: unknown trigger 'emial' — did you mean 'email'?"),
    ],
)
def test_bad_email_annotations_are_located_with_a_fix(line: str, headline: str) -> None:
    assert _errors(line) == [headline]


def test_a_mailbox_claimed_by_two_steps_is_an_error_naming_both(tmp_path: Path) -> None:
    from lineage_defs.project import load_project

    pipes = write_steps(tmp_path / "pipes", {
        "p/a.sql": "-- pipeline\n-- on email name=orders\n-- materialize duckdb://warehouse/a append\nSELECT value FROM _events\n",
        "p/b.sql": "-- pipeline\n-- on email name=orders\n-- materialize duckdb://warehouse/b append\nSELECT value FROM _events\n",
    })  # fmt: skip
    project = load_project(str(pipes), LineageSettings(state_dir=str(tmp_path / "state"), use_cache=False))
    assert [e.headline() for e in project.errors] == [
        "p/b.sql:2:4: mailbox 'orders' is declared twice (also by p/a.sql) — give one of them another name= (each mailbox feeds one step)"
    ]


# -- the event ----------------------------------------------------------------------------------
def mail(i: int, to: str = "orders@shop.example", attach: bool = True, subject: str | None = None) -> EmailMessage:
    m = EmailMessage()
    m["From"], m["To"], m["Subject"] = "Shop Bot <bot@shop.example>", to, subject or f"order {i}"
    m["Message-ID"] = f"<order-{i}@shop.example>"
    m["Date"] = "Tue, 01 Dec 2026 10:00:00 +0000"
    m.set_content(f"{i}\n")
    if attach:
        m.add_attachment(b"id,amount\n1,2\n" * 5, maintype="text", subtype="csv", filename=f"order-{i}.csv")
    return m


def test_a_message_becomes_its_fields_and_its_attachments_names_and_sizes() -> None:
    m = mail(7, subject="Bestellung über 5 €")
    m["Cc"] = "audit@shop.example"
    doc = parse_mail(m.as_bytes())
    assert doc == {
        "from": "Shop Bot <bot@shop.example>",
        "to": "orders@shop.example",
        "cc": "audit@shop.example",
        "subject": "Bestellung über 5 €",  # sent RFC 2047-encoded, decoded here
        "date": "2026-12-01T10:00:00+00:00",
        "message_id": "<order-7@shop.example>",
        "text": "7\n",
        "attachments": [{"name": "order-7.csv", "size": 70}],
    }
    assert parse_mail(mail(8, attach=False).as_bytes())["attachments"] == []
    with pytest.raises(Unusable, match="no mail headers"):
        parse_mail(b"garbage without headers \xff\r\n")
    with pytest.raises(Unusable, match="no From header"):
        parse_mail(b"Subject: hi\r\n\r\nbody\r\n")


# -- the sensor ---------------------------------------------------------------------------------
def test_the_email_sensor_is_running_and_names_its_mailbox_and_the_receiver(tmp_path: Path) -> None:
    pipes = write_steps(tmp_path / "pipes", {"p/m.sql": "-- pipeline\n-- on email name=orders\n-- materialize duckdb://warehouse/m append\nSELECT value FROM _events\n"})
    defs = build_definitions(pipes, settings=LineageSettings(state_dir=str(tmp_path / "state")))
    sensor = next(s for s in defs.sensors if s.name == "p__m__email_orders")
    assert sensor.default_status == DefaultSensorStatus.RUNNING
    assert sensor.description == "p/m.sql:2: on email — mail to orders@… sent to `lineage-defs email serve`"
    with DagsterInstance.ephemeral() as instance:
        result = sensor.evaluate_tick(build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))
    assert not result.run_requests


# -- the receiver, fed by smtplib ---------------------------------------------------------------
ROWS = "duckdb://warehouse/mail_rows"
STEPS = {
    "mail/mail_rows.sql": f"""-- pipeline
-- on email name=orders
-- materialize {ROWS} append
SELECT CAST(trim(json_extract_string(value, '$.text')) AS BIGINT) AS n,
       json_extract_string(value, '$.attachments[0].name') AS attachment,
       json_extract_string(value, '$.subject') AS subject
FROM _events
""",
    "mail/alerts.sql": """-- pipeline
-- on email name=alerts
-- materialize duckdb://warehouse/alert_rows append
SELECT value FROM _events
""",
}
STREAM, ALERTS = "email:orders", "email:alerts"
SENSOR = "mail__mail_rows__email_orders"
MAX_BYTES = 20_000


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("email")
    pipelines = write_steps(tmp / "pipelines", STEPS)
    state = tmp / "state"
    receiver = EmailReceiver(tmp, pipelines, state, {"LINEAGE_EMAIL_MAX_BYTES": str(MAX_BYTES)})
    receiver.start()
    try:
        yield {"tmp": tmp, "pipelines": pipelines, "state": state, "receiver": receiver}
    finally:
        receiver.stop()


def smtp(receiver: EmailReceiver) -> smtplib.SMTP:
    return smtplib.SMTP("127.0.0.1", receiver.port, timeout=30)


def test_the_receiver_refuses_unknown_mailboxes_and_oversize_mail_and_stores_nothing_for_them(world: dict[str, Any]) -> None:
    receiver, state = world["receiver"], world["state"]
    with smtp(receiver) as s:
        with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
            s.send_message(mail(1, to="nobody@shop.example"))
        code, text = refused.value.recipients["nobody@shop.example"]
        assert code == 550 and text.decode() == "5.1.1 no mailbox 'nobody' here; known: alerts, orders"
        big = mail(2)
        big.add_attachment(b"x" * MAX_BYTES, maintype="application", subtype="octet-stream", filename="big.bin")
        with pytest.raises(smtplib.SMTPSenderRefused) as too_big:  # smtplib declares SIZE=: refused at MAIL FROM
            s.send_message(big)
        assert too_big.value.smtp_code == 552
    with smtp(receiver) as s:  # the size only found while reading DATA (no SIZE= declared)
        s.ehlo()
        assert s.mail("bot@shop.example")[0] == 250 and s.rcpt("orders@shop.example")[0] == 250
        code, _ = s.data(big.as_bytes(policy=big.policy.clone(linesep="\r\n")))
        assert code == 552
    for stream in (STREAM, ALERTS):
        assert stored(state, stream) == 0, f"{stream}: a refused message was stored"


def test_mixed_recipients_malformed_mail_and_resends(world: dict[str, Any]) -> None:
    receiver, state = world["receiver"], world["state"]
    with smtp(receiver) as s:
        # only the known mailboxes get it; Alerts@ in another domain and case is the alerts mailbox
        refused = s.send_message(mail(900), to_addrs=["nobody@x.example", "ALERTS@other.example", "orders@shop.example"])
        assert set(refused) == {"nobody@x.example"} and refused["nobody@x.example"][0] == 550
        assert (stored(state, STREAM), stored(state, ALERTS)) == (1, 1), "stored before the 250 the sender saw"
        # headerless garbage is accepted and kept as rejected, with its reason
        s.sendmail("bot@shop.example", ["alerts@shop.example"], b"garbage without headers \xff\r\n")
        # the same Message-ID again (a sender that missed our 250): nothing new
        s.send_message(mail(900), to_addrs=["orders@shop.example", "alerts@shop.example"])
    with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
        assert store.counts(STREAM)["events"] == 1 and store.counts(ALERTS)["events"] == 2
        count, rejected = store.rejected(ALERTS)
    assert count == 1 and rejected[0].dedupe.startswith("sha256:")
    assert rejected[0].reason == "not a usable e-mail message: Unusable: no mail headers (MissingHeaderBodySeparatorDefect)"


@pytest.mark.daemon
def test_mails_land_once_across_a_daemon_kill_a_receiver_kill_and_resends(world: dict[str, Any]) -> None:
    tmp, state, pipelines, receiver = world["tmp"], world["state"], world["pipelines"], world["receiver"]
    daemon = Daemon(tmp, pipelines, state)
    logs = daemon.log_tail
    n, m = 60, 40
    before = [900] if stored(state, STREAM) else []  # mail 900 of the test above, if it ran: stored, not yet run

    def send(ids: range, pause: float = 0.0) -> None:
        with smtp(receiver) as s:
            for i in ids:
                s.send_message(mail(i))
                time.sleep(pause)

    with smtp(receiver) as s:
        s.sendmail("bot@shop.example", ["orders@shop.example"], b"\x00\x01 not a mail\r\n")  # malformed, among the first
    send(range(n))
    daemon.start()
    try:
        wait_for("the first rows", lambda: len(table_rows(state, ROWS)) > 0, 180, logs)
        sender = threading.Thread(target=send, args=(range(n, n + m), 0.05))
        sender.start()
        time.sleep(0.5)
        assert daemon.crash(), "the daemon's whole process group (code server, run workers) was SIGKILLed"
        sender.join()
        receiver.crash()  # what it answered 250 for is on disk
        receiver.start()
        send(range(n + m - 10, n + m))  # the sender resends its last mails (it never saw their 250, say)
        daemon.start()
        wait_for(f"{n + m} rows", lambda: len(table_rows(state, ROWS)) >= n + m + len(before), 240, logs)
        instance = daemon.instance()
        wait_for("all runs finished", lambda: finished(instance), 120, logs)

        rows = table_rows(state, ROWS, "n, attachment, subject")
        assert sorted(r[0] for r in rows) == list(range(n + m)) + before, "every mail exactly once"
        assert all(r[1] == f"order-{r[0]}.csv" and r[2] == f"order {r[0]}" for r in rows)
        assert len({r.tags["lineage/batch"] for r in runs(instance, **{"dagster/sensor_name": SENSOR})}) >= 2
        with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
            count, rejected = store.rejected(STREAM)
            assert store.counts(STREAM)["events"] == n + m + 1 + len(before)
        assert count == 1 and "no mail headers" in rejected[0].reason

        def told() -> Any:
            return next((r for r in skip_reasons(instance, SENSOR, 20) if "rejected" in r), None)

        reason = wait_for("a skip reason naming the rejected mail", told, 60, logs)
        assert reason.startswith("mailbox 'orders': ") and "1 event rejected and will not run" in reason
        listing = subprocess.run(
            [str(Path(sys.executable).parent / "lineage-defs"), "events", "--stream", STREAM],
            capture_output=True, text=True, timeout=120,
            env={"PATH": "/usr/bin:/bin", "LINEAGE_STATE_DIR": str(state), "LINEAGE_PIPELINES_DIR": str(pipelines)},
        )  # fmt: skip
        assert listing.returncode == 0, listing.stderr
        assert "no mail headers" in listing.stdout
    finally:
        daemon.stop()
