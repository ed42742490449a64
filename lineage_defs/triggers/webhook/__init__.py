"""Webhook triggers: the receiver (``app``, ``serve``: ``lineage-defs webhooks serve``) and ``source`` (its row in ``triggers.sources``)."""
