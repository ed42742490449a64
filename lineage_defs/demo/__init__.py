"""`lineage-defs demo`: the bundled example with every trigger live, and a way to try them.

``up`` (what ``make demo`` runs) starts the UI with its daemon, a Kafka broker
and the webhook receiver together; ``stop`` (``make demo-stop``) stops them;
``send kafka|webhook`` produces a message or posts a signed request to them.
"""
