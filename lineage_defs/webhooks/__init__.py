"""``lineage-defs webhooks serve``: the receiver of ``on webhook`` steps (Starlette on uvicorn)."""
