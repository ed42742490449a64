"""NATS triggers: ``reader`` (a JetStream durable pull consumer → event store, acked after the store), ``source`` (its row in ``triggers.sources``) and ``sensor`` (what a tick reads with)."""
