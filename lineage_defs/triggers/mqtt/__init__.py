"""MQTT triggers: ``reader`` (a persistent QoS 1 session → event store, acknowledged after the store) and ``sensor``."""
