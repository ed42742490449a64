"""MQTT triggers: ``reader`` (a persistent QoS 1 session → event store, acknowledged after the store), ``source`` (its row in ``triggers.sources``) and ``sensor`` (what a tick reads with)."""
