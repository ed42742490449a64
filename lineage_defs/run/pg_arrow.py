"""A PostgreSQL result (psycopg description + rows) as an Arrow table with the result's own types.

The types come from the cursor description, not from the values: an empty
first result must not freeze the target as all-VARCHAR, and a column that is
NULL in every row keeps its type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

# PostgreSQL type name → Arrow type (DuckDB's postgres scanner maps them alike).
_SIMPLE: dict[str, Any] = {
    "bool": pa.bool_(),
    "int2": pa.int16(),
    "int4": pa.int32(),
    "int8": pa.int64(),
    "oid": pa.int64(),
    "float4": pa.float32(),
    "float8": pa.float64(),
    "date": pa.date32(),
    "time": pa.time64("us"),
    "timestamp": pa.timestamp("us"),
    "timestamptz": pa.timestamp("us", tz="UTC"),
    "interval": pa.duration("us"),
    "bytea": pa.binary(),
    "text": pa.string(),
    "varchar": pa.string(),
    "bpchar": pa.string(),
    "name": pa.string(),
    "char": pa.string(),
}
_AS_TEXT: dict[str, Callable[[Any], str]] = {"json": json.dumps, "jsonb": json.dumps}


def _arrow_type(type_name: str, precision: int | None, scale: int | None) -> tuple[Any, Callable[[Any], Any] | None]:
    """(Arrow type, value converter or None) for one column."""
    if type_name.startswith("_"):  # an array: a list of its element type
        inner, item = _arrow_type(type_name[1:], None, None)
        if item is None:
            return pa.list_(inner), None
        convert = item
        return pa.list_(inner), lambda v: [convert(x) if x is not None else None for x in v]
    if type_name == "numeric":
        if precision is not None and precision <= 38:
            return pa.decimal128(precision, scale or 0), None
        return pa.float64(), float  # unconstrained NUMERIC: DOUBLE, as DuckDB's postgres scanner reads it
    if type_name in _SIMPLE:
        return _SIMPLE[type_name], None
    # uuid, json, enums, anything else: its text form
    return pa.string(), _AS_TEXT.get(type_name, str)


def arrow_table(description: Sequence[Any], rows: Sequence[Sequence[Any]], type_name: Callable[[int], str | None]) -> Any:
    """``type_name(oid)`` names a column's PostgreSQL type (``conn.adapters.types``)."""
    fields, columns = [], []
    for i, d in enumerate(description):
        typ, conv = _arrow_type(type_name(d.type_code) or "unknown", d.precision, d.scale)
        values = [r[i] for r in rows]
        if conv is not None:
            values = [conv(v) if v is not None else None for v in values]
        fields.append(pa.field(d.name, typ))
        columns.append(pa.array(values, type=typ))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))
