"""The lineage explorer (``lineage-defs docs build`` / ``docs serve``): a static site of the plan's assets and column lineage."""
