"""Dagster op names for steps: unique, valid, stable across loads. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lineage_defs.parse.model import Email, EventTrigger, Kafka, Mqtt, Nats, Postgres, Sqs, Webhook


def op_name(pipeline: str, rel: str, names: set[str]) -> str:
    stem = rel.split("/", 1)[1] if "/" in rel else rel
    for suffix in (".pg.sql", ".sql", ".py", ".sh"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
            break
    base = re.sub(r"[^A-Za-z0-9_]", "_", f"{pipeline}__{stem}")
    if base[0].isdigit():
        base = "_" + base
    name, i = base, 2
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    return name


def hook_name(step_name: str, name: str | None) -> str:
    """``on webhook name=<n>`` (``[a-z0-9_]+``, checked by the grammar), else the step's name in lower case
    (``shop/payments.py`` → ``shop__payments``)."""
    return name or step_name.lower()


def hook_env(name: str) -> str:
    """``payments_eu`` → ``PAYMENTS_EU``: the suffix of LINEAGE_WEBHOOK_TOKEN_/SECRET_ (one-to-one on hook names)."""
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def kafka_stream(step_name: str, topic: str) -> str:
    """The event store's stream of one step's topic."""
    return f"kafka:{step_name}:{topic}"


def webhook_stream(hook: str) -> str:
    """The event store's stream of one hook."""
    return f"webhook:{hook}"


def sqs_stream(step_name: str, queue: str) -> str:
    """The event store's stream of one step's queue (by name: the URL's last segment)."""
    return f"sqs:{step_name}:{queue}"


def postgres_stream(step_name: str, table: str) -> str:
    """The event store's stream of one step's table changes."""
    return f"postgres:{step_name}:{table}"


def mqtt_stream(step_name: str, topic: str) -> str:
    """The event store's stream of one step's MQTT topic filter."""
    return f"mqtt:{step_name}:{topic}"


def nats_stream(step_name: str, stream: str, subject: str) -> str:
    """The event store's stream of one step's NATS subject in a JetStream stream."""
    return f"nats:{step_name}:{stream}:{subject}"


def email_stream(mailbox: str) -> str:
    """The event store's stream of one mailbox (one step reads it: mailboxes are unique in a project)."""
    return f"email:{mailbox}"


# Each event trigger kind names its stream in the event store.
_STREAMS: dict[type, Callable[[str, Any], str]] = {
    Kafka: lambda step, t: kafka_stream(step, t.topic),
    Webhook: lambda step, t: webhook_stream(hook_name(step, t.name)),
    Sqs: lambda step, t: sqs_stream(step, t.queue_name),
    Postgres: lambda step, t: postgres_stream(step, t.table),
    Mqtt: lambda step, t: mqtt_stream(step, t.topic),
    Nats: lambda step, t: nats_stream(step, t.stream, t.subject),
    Email: lambda step, t: email_stream(t.name),
}


def stream_of(step_name: str, trigger: EventTrigger) -> str:
    """The event store's stream an `on <source>` line of a step feeds."""
    return _STREAMS[type(trigger)](step_name, trigger)
