"""What an ``on sqs queue=...`` sensor's tick reads with (``Source.connect``; the row: ``source``).

A pull source (``triggers.pull``): a tick receives the queue's messages into
the event store and deletes them after the store committed
(``reader.SqsReader``), then asks for one run per batch (``emit``). The
endpoint comes from ``LINEAGE_SQS_ENDPOINT_URL[_<CONNECTION>]`` (the default
connection without one is AWS itself), credentials and region from the
usual AWS variables.
"""

from __future__ import annotations

from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import PartitionOf
from lineage_defs.triggers.pull import NotConfigured, Pull, Reader
from lineage_defs.triggers.sqs.source import SOURCE, Sqs


def connect(step: ScriptStep, q: Sqs, settings: LineageSettings, partition_of: PartitionOf | None) -> Pull:
    env = SOURCE.connection_env(q.connection)

    def reader() -> Reader:
        from lineage_defs.triggers.sqs.reader import SqsReader, SqsSource  # boto3: imported when a tick runs

        endpoint = settings.connection("sqs", q.connection)
        # the default connection needs no variable (boto3's own endpoint: AWS); a named one does
        if endpoint is None and q.connection != "default":
            raise NotConfigured(f"no SQS endpoint for connection '{q.connection}': set {env} (e.g. https://sqs.eu-west-1.amazonaws.com)")
        return SqsReader(SqsSource(q.queue, endpoint, partition_of, budget_seconds=settings.kafka_poll_seconds))

    return Pull(reader, f"endpoint from {env}, else AWS; messages deleted once stored")
