"""Kafka triggers: ``drain`` (topic → event store, offsets committed after the store), ``source`` (its row in ``triggers.sources``) and ``sensor`` (what a tick reads with)."""
