"""``LineageDuckDBResource``: a ``DuckDBResource`` whose connection is a step's session.

What ``runtime.connect()`` gives a Python step — the ``warehouse`` DuckDB
file as the default catalog, the ``main`` DuckLake attached as ``lake``,
extensions from the ``duckdb-ext-*`` wheels — for a hand-written asset::

    @dg.asset
    def top_customers(lineage_duckdb: LineageDuckDBResource) -> None:
        with lineage_duckdb.get_connection() as conn:
            conn.sql("SELECT customer_id, sum(amount_eur) FROM lake.main.orders GROUP BY 1")

It holds the same state lock as the steps while the connection is open
(the embedded files admit one writing process), and closes the connection
however the block ends. The lineage I/O manager needs that lock too: an
output yielded (or an input loaded) while such a connection is open is an
error that says so, not a wait on itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster_duckdb import DuckDBResource

from lineage_defs.assets.resources import RunSettingsConfig


_open = [0]  # connections of this process now open (the state lock is held meanwhile)


def open_connections() -> int:
    return _open[0]


class LineageDuckDBResource(DuckDBResource):
    """DuckDB on the pipelines' state: ``database`` names the warehouse file it opens."""

    lineage: RunSettingsConfig

    @contextmanager
    def get_connection(self) -> Iterator[Any]:
        from lineage_defs.run.substrates import Session

        session = Session(self.lineage.settings())
        _open[0] += 1
        try:
            session.use_warehouse()
            yield session.conn
        finally:
            _open[0] -= 1
            session.close()
