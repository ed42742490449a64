"""``on sqs queue=<name-or-url> [connection=…]``: the SQS source as data (see ``triggers.source``). No Dagster, no boto3."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lineage_defs.errors import Location
from lineage_defs.triggers.source import BadValue, Option, Source


@dataclass(frozen=True)
class Sqs:
    """``on sqs queue=<name-or-url> [connection=…]``."""

    queue: str  # a queue name, or its https:// URL
    connection: str
    partition_from: str | None
    max_batch: int | None
    at: Location

    @property
    def queue_name(self) -> str:
        """The name alone (the last path segment of a URL)."""
        return self.queue.rstrip("/").rsplit("/", 1)[-1]


_SQS_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}(\.fifo)?")


def sqs_queue(v: str) -> str:
    """A queue name (``[A-Za-z0-9_-]{1,80}``, ``.fifo`` allowed) or its http(s) URL."""
    if re.fullmatch(r"https?://[^\s/]+/\S+", v) or _SQS_NAME.fullmatch(v):
        return v
    fixed = re.sub(r"[^A-Za-z0-9_-]", "_", v.rsplit("/", 1)[-1])[:80] or "orders"
    raise BadValue(f"bad SQS queue '{v}'", f"write a queue name of letters, digits, - and _ (e.g. queue={fixed}) or the queue's https:// URL")


SOURCE = Source(
    keyword="sqs",
    record=Sqs,
    options=(
        Option("queue", (sqs_queue,), required=True, example="orders (a queue name, or its https:// URL)"),
        Option("connection", ("connection",), default="default"),
    ),
    identity=lambda step, t: (t.queue_name,),
    env="LINEAGE_SQS_ENDPOINT_URL",
    connect="lineage_defs.triggers.sqs.sensor:connect",
    label="queue {t.queue_name}",
)
