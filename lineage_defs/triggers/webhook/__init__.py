"""Webhook triggers: the receiver (``app``, ``serve``: ``lineage-defs webhooks serve``) and the ``sensor``."""
