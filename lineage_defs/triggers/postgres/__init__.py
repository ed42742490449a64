"""PostgreSQL change triggers: ``pgoutput`` (the decoder), ``reader`` (slot → event store, advanced after the store) and ``sensor``."""
