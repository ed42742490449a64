"""SQS triggers: ``reader`` (queue → event store, messages deleted after the store), ``source`` (its row in ``triggers.sources``) and ``sensor`` (what a tick reads with)."""
