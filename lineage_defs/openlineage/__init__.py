"""OpenLineage events for every materialization, when the client is configured the standard way.

Layers, each importing only those above it::

    config    is the client configured (OPENLINEAGE_URL, openlineage.yml, OPENLINEAGE__…)? No import of it.
    spec      what an event says, as plain data: jobs, runs, datasets named from asset URIs,
              columns, column edges and their OpenLineage transformation (no OpenLineage import)
    events    spec → the client's own classes (``event_v2``, ``facet_v2``)
    emitter   a background sender with a time budget: a dead or slow endpoint costs a run at most
              ``LINEAGE_OPENLINEAGE_TIMEOUT`` seconds, and never fails it
    observe   around a step's op body: START, then COMPLETE (or FAIL) per step with what it wrote

Nothing is imported or started unless the client is configured.
"""
