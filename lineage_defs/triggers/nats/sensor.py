"""What an ``on nats subject=... stream=...`` sensor's tick reads with (``Source.connect``; the row: ``source``).

A pull source (``triggers.pull``): a tick fetches from the step's durable
JetStream consumer, stores the messages and acknowledges them after the store
(``reader.NatsReader``), then asks for one run per batch (``emit``). The
server comes from ``LINEAGE_NATS_URL[_<CONNECTION>]``; without one the sensor
skips and says which variable to set.
"""

from __future__ import annotations

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.nats.source import SOURCE, Nats
from lineage_defs.triggers.pull import NotConfigured, Pull, Reader


def connect(step: ScriptStep, n: Nats, settings: LineageSettings, partition_of: PartitionOf | None) -> Pull:
    from lineage_defs.triggers.nats.reader import consumer_name  # no nats-py here: only the consumer's name

    env = SOURCE.connection_env(n.connection)
    consumer = consumer_name(step.name, n.subject)
    # a message fetched in a tick is not delivered again before that tick is over
    ack_wait = settings.kafka_poll_seconds + 20

    def reader() -> Reader:
        from lineage_defs.triggers.nats.reader import NatsReader, NatsSource  # nats-py: imported when a tick runs

        url = settings.connection("nats", n.connection)
        if not url:
            raise NotConfigured(f"no NATS server for connection '{n.connection}': set {env} (e.g. nats://127.0.0.1:4222)")
        return NatsReader(NatsSource(url, n.stream, n.subject, consumer, partition_of, ack_wait_seconds=ack_wait))

    return Pull(reader, f"JetStream durable consumer {consumer}; server from {env}; acked once stored")
