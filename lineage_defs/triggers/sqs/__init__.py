"""SQS triggers: ``reader`` (queue → event store, messages deleted after the store) and ``sensor``."""
