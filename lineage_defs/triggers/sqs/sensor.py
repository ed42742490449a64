"""``on sqs queue=...`` → a sensor per (step, queue), RUNNING by default.

A pull source (``triggers.pull``): a tick receives the queue's messages into
the event store and deletes them after the store committed
(``reader.SqsReader``), then asks for one run per batch (``emit``). The
endpoint comes from ``LINEAGE_SQS_ENDPOINT_URL[_<CONNECTION>]`` (the default
connection without one is AWS itself), credentials and region from the
usual AWS variables.
"""

from __future__ import annotations

from collections.abc import Sequence

from dagster import AssetKey, PartitionsDefinition, SensorDefinition

from lineage_defs.parse.model import Sqs
from lineage_defs.plan.names import sqs_stream
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.keys import default_source, partition_function
from lineage_defs.triggers.pull import NotConfigured, Reader
from lineage_defs.triggers.sensor import pull_sensor, slug


def sensor_name(step: ScriptStep, q: Sqs) -> str:
    return f"{step.name}__sqs_{slug(q.queue_name)}"


def sqs_sensor(step: ScriptStep, q: Sqs, keys: Sequence[AssetKey], pdef: PartitionsDefinition | None, settings: LineageSettings) -> SensorDefinition:
    partition_of = partition_function(default_source(step.partitioning, q.partition_from), pdef)
    env = settings.sqs_env(q.connection)

    def reader() -> Reader:
        from lineage_defs.triggers.sqs.reader import SqsReader, SqsSource  # boto3: imported when a tick runs

        configured, endpoint = settings.sqs_endpoint(q.connection)
        if not configured:
            raise NotConfigured(f"no SQS endpoint for connection '{q.connection}': set {env} (e.g. https://sqs.eu-west-1.amazonaws.com)")
        return SqsReader(SqsSource(q.queue, endpoint, partition_of, budget_seconds=settings.kafka_poll_seconds))

    description = f"{step.path}:{q.at.line}: on sqs queue={q.queue} (endpoint from {env}, else AWS; messages deleted once stored)"
    return pull_sensor(sensor_name(step, q), description, sqs_stream(step.name, q.queue_name), f"queue {q.queue_name}", reader, keys, pdef, settings, q.max_batch)
