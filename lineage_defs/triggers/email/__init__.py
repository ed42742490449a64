"""E-mail triggers: the SMTP receiver (``receiver``, ``serve``: ``lineage-defs email serve``) and the ``sensor``."""
