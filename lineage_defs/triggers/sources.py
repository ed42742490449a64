"""The table of trigger sources: one row per source folder. No Dagster, no client library.

The parser (``on <keyword>`` lines), the settings (each source's connection
variables), the naming of streams and sensors (``plan.names``) and the sensor
builder (``triggers.build``) read this table and nothing else about a source.
Adding a source: a folder with its ``source.py`` (a record and a ``Source``,
see ``triggers.source``) and what runs on a tick, its entry here (the import
and ``SOURCES``), and its docs.
"""

from __future__ import annotations

from typing import Any

from lineage_defs.triggers.email.source import SOURCE as EMAIL
from lineage_defs.triggers.kafka.source import SOURCE as KAFKA
from lineage_defs.triggers.mqtt.source import SOURCE as MQTT
from lineage_defs.triggers.nats.source import SOURCE as NATS
from lineage_defs.triggers.postgres.source import SOURCE as POSTGRES
from lineage_defs.triggers.source import Source
from lineage_defs.triggers.sqs.source import SOURCE as SQS
from lineage_defs.triggers.webhook.source import SOURCE as WEBHOOK

# In the order the parser's messages list them.
SOURCES: tuple[Source, ...] = (KAFKA, SQS, POSTGRES, MQTT, NATS, WEBHOOK, EMAIL)

BY_KEYWORD: dict[str, Source] = {s.keyword: s for s in SOURCES}
BY_RECORD: dict[type, Source] = {s.record: s for s in SOURCES}
RECORDS: tuple[type, ...] = tuple(s.record for s in SOURCES)


def source_of(trigger: Any) -> Source:
    """The source a parsed ``on <keyword>`` line belongs to."""
    return BY_RECORD[type(trigger)]
