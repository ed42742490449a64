"""Hand-written Dagster assets beside the example's pipelines, in the same code location.

``make demo`` names this file in ``LINEAGE_DEFINITIONS``, so
``lineage_defs.definitions`` merges its ``defs`` into the pipelines'
Definitions (``build_definitions(..., defs=...)`` does the same in code).
Both directions of the dagster-duckdb interop:

- ``order_sizes`` is plain pandas: its input ``orders`` is one day of the
  script table ``ducklake://main/orders``, loaded by the lineage I/O manager
  (the partition's rows); the DataFrame it returns is written by the same
  I/O manager to ``lake.main.order_sizes``, that day's rows replaced;
- ``analytics/order_size_mix.sql`` reads ``lake.main.order_sizes``: the
  script depends on this asset (one node, keyed like the table), and its
  column lineage starts at this asset's columns.
"""

# No `from __future__ import annotations` here: Dagster reads the `context` annotation itself.
import dagster as dg
import pandas as pd

from lineage_defs.duckdb_io import IO_MANAGER_KEY

BANDS = [0, 20, 50, 100, float("inf")]
LABELS = ["under 20", "20-50", "50-100", "100 and over"]


@dg.asset(
    key=["ducklake", "main", "order_sizes"],
    group_name="analytics",
    partitions_def=dg.DailyPartitionsDefinition(start_date="2025-01-01"),
    ins={"orders": dg.AssetIn(key=["ducklake", "main", "orders"])},
    io_manager_key=IO_MANAGER_KEY,
    kinds={"pandas", "ducklake"},
)
def order_sizes(context: dg.AssetExecutionContext, orders: pd.DataFrame) -> pd.DataFrame:
    """Orders of one day by size band (euros): how many, and their revenue. Cancelled orders do not count."""
    kept = orders[orders["status"] != "cancelled"]
    band = pd.cut(kept["amount_eur"].astype(float), bins=BANDS, labels=LABELS, right=False).astype(str)
    out = kept.assign(size_band=band).groupby("size_band", as_index=False).agg(orders=("order_id", "count"), revenue_eur=("amount_eur", "sum"))
    context.log.info(f"{len(orders)} orders of {context.partition_key} in {len(out)} bands")
    return out.astype({"orders": "int64", "revenue_eur": "float64"})


defs = dg.Definitions(assets=[order_sizes])
