"""`lineage-defs demo`: the bundled example with every trigger live, and a way to try them.

``up`` (what ``make demo`` runs) starts the UI with its daemon, a Kafka broker
and the webhook and e-mail receivers together; ``stop`` (``make demo-stop``)
stops them; ``send kafka|webhook|email`` produces messages, posts signed
requests or mails invoices to them; ``console`` picks what of ``dagster dev``'s
output the terminal shows.
"""
