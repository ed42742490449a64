"""NATS triggers: ``reader`` (a JetStream durable pull consumer → event store, acked after the store) and ``sensor``."""
