"""Kafka triggers: ``drain`` (topic → event store, offsets committed after the store) and ``sensor``."""
