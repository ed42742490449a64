"""dagster-duckdb interop: hand-written assets read and write the relations our steps use.

Layers, each importing only those above it::

    relations   asset key / metadata → asset URI → the relation in a session (pure mapping)
    handlers    the pyarrow type handler (dagster-duckdb ships pandas, polars, pyspark only)
    resource    LineageDuckDBResource: a DuckDBResource whose connection has the lake and
                warehouse attached, as ``runtime.connect()`` gives a Python step
    io_manager  LineageDuckDBIOManager: dagster-duckdb's I/O manager with our keys, partitions,
                locking and one transaction per write

``build_definitions`` adds both to the Definitions under ``RESOURCE_KEY`` and
``IO_MANAGER_KEY``, and points every table asset's downstream loads at the
I/O manager (``AssetSpec.with_io_manager_key``)::

    @dg.asset(partitions_def=daily, ins={"orders": dg.AssetIn(key=["ducklake", "main", "orders"])},
              key=["ducklake", "main", "order_sizes"], io_manager_key=IO_MANAGER_KEY)
    def order_sizes(orders: pd.DataFrame) -> pd.DataFrame:   # the partition's rows of lake.main.orders
        ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lineage_defs.assets.resources import IO_MANAGER_KEY, RESOURCE_KEY  # the keys every build binds them under

__all__ = ["IO_MANAGER_KEY", "RESOURCE_KEY", "LineageDuckDBIOManager", "LineageDuckDBResource"]

if TYPE_CHECKING:
    from lineage_defs.duckdb_io.io_manager import LineageDuckDBIOManager
    from lineage_defs.duckdb_io.resource import LineageDuckDBResource

_WHERE = {"LineageDuckDBIOManager": "lineage_defs.duckdb_io.io_manager", "LineageDuckDBResource": "lineage_defs.duckdb_io.resource"}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
