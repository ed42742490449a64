"""Event triggers (SPEC section 6): one folder per source, one table of sources.

Each source lives in a package of its own — ``kafka``, ``sqs``, ``postgres``,
``mqtt`` and ``nats`` (pull sources: a ``pull.Reader`` a sensor tick drains),
``webhook`` and ``email`` (push sources: a receiver writing the store through
``push``) — whose ``source.py`` describes it as data (``source.Source``: its
``on`` line, stream, connection variables, what runs on a tick). ``sources``
is the table of them, read by the parser, the settings, ``plan.names`` and
the sensor builder (``build``). What they share: the loop every pull source
runs (``pull``), the durable event store (``lineage_defs.events``), the sensor
that cuts stored events into batches and asks for runs (``sensor``), and event
values → partition keys (``keys``). To add a source: a folder here with its
``source.py``, its entry in ``sources.SOURCES``, and its docs.

Importing this package imports nothing (the parser reads ``sources`` without Dagster).
"""
