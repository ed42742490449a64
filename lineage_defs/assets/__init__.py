"""Stage 3: step specs → Dagster definitions (the only layer that imports dagster, besides sensors)."""
