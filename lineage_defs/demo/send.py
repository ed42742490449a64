"""`lineage-defs demo send kafka|webhook|email`: try the example's event steps without writing a client.

Talks to the running demo (``demo.state``): produces JSON messages to its
broker, posts a signed JSON body to its webhook receiver (bearer token,
``X-Lineage-Signature: sha256=<HMAC of the body>``, an ``Idempotency-Key``),
or mails an invoice with a CSV attachment to its e-mail receiver (smtplib).
The default payloads have the shape of the bundled example's steps —
``shop/order_events.sql`` reads order events, ``shop/payments.py`` payments —
for an order of ``--day`` (the example's order ids are ``<yyyymmdd><nnnn>``);
``--value`` / ``--body`` send any JSON instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Mapping
from typing import Any

from lineage_defs.demo import state
from lineage_defs.errors import LineageDefsError

EXAMPLE_DAY = "2025-01-02"  # the day the README's walkthrough materializes
_EVENTS = ("placed", "paid", "shipped", "delivered")


def _order_id(day: str, n: int) -> int:
    """The example's n-th order of ``day`` (raw_orders.sh numbers them ``<yyyymmdd><nnnn>``)."""
    return int(dt.date.fromisoformat(day).strftime("%Y%m%d") + f"{n:04d}")


def _pick(names: list[str], given: str | None, what: str, flag: str) -> str:
    if given:
        if given not in names:
            raise LineageDefsError(f"the demo has no {what} '{given}'", fix=f"one of: {', '.join(names) or '(none)'}")
        return given
    if len(names) != 1:
        raise LineageDefsError(f"the demo has {len(names)} {what}s", fix=f"name one with {flag} ({', '.join(names) or 'none: the folder has no such step'})")
    return names[0]


def order_events(day: str, count: int) -> list[dict[str, Any]]:
    """``count`` status changes of the day's first orders: placed, paid, shipped, delivered, in turn."""
    return [{"order_id": _order_id(day, 1 + i // len(_EVENTS)), "event_type": _EVENTS[i % len(_EVENTS)]} for i in range(count)]


def payment(day: str, n: int) -> dict[str, Any]:
    """A payment of the day's n-th order, paid that day at 10:15 UTC."""
    return {"payment_id": f"demo-{uuid.uuid4().hex[:12]}", "order_id": _order_id(day, n), "amount_eur": round(19.9 + 10 * n, 2), "paid_at": f"{day}T10:15:00Z"}


def send_kafka(state_dir: str, count: int, topic: str | None, value: str | None, day: str) -> int:
    from confluent_kafka import Producer

    running = state.require_running(state_dir)
    name = _pick(running.topics, topic, "Kafka topic", "--topic")
    if not running.kafka:
        raise LineageDefsError("the running demo has no Kafka broker", fix="the folder needs an `on kafka` step")
    bootstrap = running.kafka.get("default") or next(iter(running.kafka.values()))
    values = [json.loads(value)] * count if value else order_events(day, count)
    delivered: list[str] = []
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        (failed if err else delivered).append(str(err) if err else f"{msg.topic()}[{msg.partition()}]@{msg.offset()}")

    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 30000})
    for v in values:
        key = str(v.get("order_id", "")) if isinstance(v, dict) else ""
        producer.produce(name, key=key.encode() or None, value=json.dumps(v).encode(), on_delivery=report)
    producer.flush(35)
    for v, where in zip(values, delivered):
        print(f"{where}  {json.dumps(v)}")
    if failed or len(delivered) != len(values):
        print(f"lineage-defs demo send kafka: {len(values) - len(delivered)} of {len(values)} not delivered to {bootstrap}: {'; '.join(failed[:3])}", file=sys.stderr)
        return 1
    print(f"{len(values)} message{'s' * (len(values) != 1)} on {name}; the sensor starts a run within seconds (UI: {running.ui}/runs)", file=sys.stderr)
    return 0


def invoice(day: str, n: int, mailbox: str) -> Any:
    """A supplier's invoice mail for ``day`` with a CSV attachment (its own Message-ID: a resend of it is stored once)."""
    from email.message import EmailMessage
    from email.utils import format_datetime

    m = EmailMessage()
    m["From"], m["To"] = "Acme Supplies <billing@acme.example>", f"{mailbox}@shop.example"
    m["Subject"] = f"Invoice {day.replace('-', '')}-{n:03d}"
    m["Date"] = format_datetime(dt.datetime.fromisoformat(f"{day}T09:00:00+00:00"))
    m["Message-ID"] = f"<invoice-{uuid.uuid4().hex}@acme.example>"
    m.set_content(f"Dear shop,\n\nplease find invoice {n} for {day} attached.\n")
    m.add_attachment(f"product_id,quantity,unit_eur\n{n},10,4.20\n{n + 1},5,9.90\n".encode(), maintype="text", subtype="csv", filename=f"invoice-{n:03d}.csv")
    return m


def send_email(state_dir: str, count: int, mailbox: str | None, day: str) -> int:
    import smtplib

    running = state.require_running(state_dir)
    name = _pick(running.mailboxes, mailbox, "mailbox", "--mailbox")
    if not running.email:
        raise LineageDefsError("the running demo has no e-mail receiver", fix="the folder needs an `on email` step")
    host, port = running.email.removeprefix("smtp://").rsplit(":", 1)
    try:
        with smtplib.SMTP(host, int(port), timeout=30) as smtp:
            for i in range(count):
                m = invoice(day, i + 1, name)
                smtp.send_message(m)
                print(f"250 {m['Message-ID']}  {m['Subject']}")
    except (OSError, smtplib.SMTPException) as e:
        print(f"lineage-defs demo send email: {running.email}: {e}", file=sys.stderr)
        return 1
    print(f"{count} mail{'s' * (count != 1)} to {name}@ at {running.email}; the sensor starts a run within seconds (UI: {running.ui}/runs)", file=sys.stderr)
    return 0


def signed_request(url: str, body: bytes, cred: state.Credential, idempotency_key: str) -> urllib.request.Request:
    signature = hmac.new(cred.secret.encode(), body, hashlib.sha256).hexdigest()
    return urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Authorization": f"Bearer {cred.token}",
        "X-Lineage-Signature": f"sha256={signature}",
        "Idempotency-Key": idempotency_key,
    })  # fmt: skip


def send_webhook(state_dir: str, count: int, hook: str | None, body: str | None, day: str, env: Mapping[str, str]) -> int:
    running = state.require_running(state_dir)
    name = _pick(running.hooks, hook, "webhook", "--hook")
    cred = state.credentials(state_dir, [name], env)[name]
    url = f"{running.webhooks}/hooks/{name}"
    for i in range(count):
        payload = json.loads(body) if body else payment(day, i + 1)
        data = json.dumps(payload).encode()
        key = str(payload.get("payment_id")) if isinstance(payload, dict) and payload.get("payment_id") else uuid.uuid4().hex
        try:
            with urllib.request.urlopen(signed_request(url, data, cred, key), timeout=30) as resp:
                answer = resp.read().decode()
        except urllib.error.HTTPError as e:
            print(f"lineage-defs demo send webhook: {url} answered {e.code}: {e.read().decode(errors='replace')[:500]}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"lineage-defs demo send webhook: {url}: {e}", file=sys.stderr)
            return 1
        print(f"{answer}  {data.decode()}")
    print(f"{count} post{'s' * (count != 1)} to {url}; the sensor starts a run within seconds (UI: {running.ui}/runs)", file=sys.stderr)
    return 0
