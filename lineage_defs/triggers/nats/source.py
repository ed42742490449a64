"""``on nats subject=<subject> stream=<stream> [connection=…]``: the NATS JetStream source as data
(see ``triggers.source``). No Dagster, no nats-py."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs.errors import Location
from lineage_defs.triggers.source import BadValue, Option, Source


@dataclass(frozen=True)
class Nats:
    """``on nats subject=<subject> stream=<stream> [connection=…]``."""

    subject: str  # tokens split by ., * for one whole token, > as the last
    stream: str  # the JetStream stream holding the subject
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location


_NATS_STREAM = re.compile(r"[A-Za-z0-9_-]{1,255}")


def nats_subject(v: str) -> str:
    """A NATS subject: tokens split by ``.``, ``*`` only as a whole token, ``>`` only as the whole last one."""
    tokens = v.split(".")
    if all(tk and (tk in ("*", ">") or not ("*" in tk or ">" in tk)) for tk in tokens) and ">" not in tokens[:-1]:
        return v
    fixed = ".".join("*" if "*" in tk else (">" if ">" in tk else tk) for tk in tokens if tk)
    fixed = fixed.split(">", 1)[0] + ">" if ">" in fixed else fixed
    raise BadValue(f"bad NATS subject '{v}'", f"write tokens split by '.', '*' for one whole token and '>' only for the whole last one, e.g. subject={fixed or 'orders.created'}")


def nats_stream(v: str) -> str:
    """A JetStream stream name (no '.', '*', '>', '/' or spaces: letters, digits, - and _)."""
    if _NATS_STREAM.fullmatch(v):
        return v
    fixed = re.sub(r"[^A-Za-z0-9_-]", "_", v) or "ORDERS"
    raise BadValue(f"bad JetStream stream name '{v}'", f"use letters, digits, - and _ only, e.g. stream={fixed}")


SOURCE = Source(
    keyword="nats",
    record=Nats,
    options=(
        Option("subject", (nats_subject,), required=True, example="orders.created stream=ORDERS"),
        Option("stream", (nats_stream,), required=True, missing=("'on nats' needs stream= (the JetStream stream holding the subject)", "write on nats subject={subject} stream=ORDERS")),
        Option("connection", ("connection",), default="default"),
    ),
    identity=lambda step, t: (t.stream, t.subject),
    env="LINEAGE_NATS_URL",
    connect="lineage_defs.triggers.nats.sensor:connect",
    label="stream {t.stream} subject {t.subject}",
)
