"""E-mail triggers: the SMTP receiver (``receiver``, ``serve``: ``lineage-defs email serve``) and ``source`` (its row in ``triggers.sources``)."""
