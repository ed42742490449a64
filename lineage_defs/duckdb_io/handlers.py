"""Type handlers: dagster-duckdb's pandas handler, and a pyarrow one in the same shape.

A handler writes an object into ``<schema>.<table>`` and reads a slice back
(``handle_output`` / ``load_input`` on a connection), the interface of
dagster-duckdb's ``DbTypeHandler``. dagster-duckdb publishes no pyarrow
handler, so ``ArrowTypeHandler`` follows the pandas one's SQL. Also here:
the managed ``_partition`` column each type gets, and its columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dagster import InputContext, MetadataValue, OutputContext, TableColumn, TableSchema


@dataclass(frozen=True)
class Slice:
    """What a handler reads or writes: dagster-duckdb's table slice, fields by the same names."""

    schema: str  # SQL: '"lake"."main"'
    table: str  # SQL: '"orders"'
    columns: Sequence[str] | None = None
    database: str | None = None
    partition_dimensions: Sequence[Any] = ()  # the slice is a relation of its own: never a WHERE of theirs


class ArrowTypeHandler:
    """pyarrow Tables in and out, in the shape of dagster-duckdb's ``DuckDBPandasTypeHandler``."""

    def handle_output(self, context: OutputContext, table_slice: Slice, obj: Any, connection: Any) -> None:
        target = f"{table_slice.schema}.{table_slice.table}"
        connection.register("__lineage_arrow", obj)
        try:
            connection.execute(f"CREATE TABLE IF NOT EXISTS {target} AS SELECT * FROM __lineage_arrow WITH NO DATA")
            connection.execute(f"INSERT INTO {target} BY NAME SELECT * FROM __lineage_arrow")
        finally:
            connection.unregister("__lineage_arrow")
        context.add_output_metadata(
            {
                "dagster/partition_row_count" if context.has_partition_key else "dagster/row_count": obj.num_rows,
                "dataframe_columns": MetadataValue.table_schema(TableSchema(columns=[TableColumn(name=f.name, type=str(f.type)) for f in obj.schema])),
            }
        )

    def load_input(self, context: InputContext, table_slice: Slice, connection: Any) -> Any:
        cols = ", ".join(table_slice.columns) if table_slice.columns else "*"
        return connection.execute(f"SELECT {cols} FROM {table_slice.schema}.{table_slice.table}").fetch_arrow_table()

    @property
    def supported_types(self) -> list[type]:
        import pyarrow as pa

        return [pa.Table]


def columns_of(obj: Any) -> list[str]:
    return [str(c) for c in (obj.column_names if hasattr(obj, "column_names") else obj.columns)]


def is_empty(obj: Any) -> bool:
    return int(obj.num_rows if hasattr(obj, "num_rows") else len(obj)) == 0


def partition_values(obj: Any, column: str) -> set[str]:
    values = obj.column(column).to_pylist() if hasattr(obj, "num_rows") else obj[column].tolist()
    return {str(v) for v in values}


def with_column(obj: Any, column: str, value: str) -> Any:
    """``obj`` with a constant text column appended (a new object: the caller's stays as it was)."""
    if hasattr(obj, "num_rows"):
        import pyarrow as pa

        return obj.append_column(column, pa.array([value] * obj.num_rows, pa.string()))
    return obj.assign(**{column: value})


def reordered(obj: Any, names: Sequence[str]) -> Any:
    """``obj``'s columns in ``names``' order (the pandas handler inserts by position)."""
    return obj.select(list(names)) if hasattr(obj, "num_rows") else obj[list(names)]
