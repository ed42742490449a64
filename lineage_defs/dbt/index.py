"""The static-analysis engine's parquet index → column edges and column types, in bounded memory.

Two files, read by column NAME (the engine may add or reorder columns), from
``<target>/index/`` or ``<target>/info_schema/v1/``:

- ``dbt.column_lineage.parquet``: from/to node id, from/to column, ``lineage_kind``;
- ``dbt.node_columns.parquet``: unique_id, column_name, declared_type, inferred_type, column_index.

Rows are streamed in record batches (``ParquetFile.iter_batches``) and
filtered to the nodes just built before any Python object is made. Direct
edges (copy/mod) are kept before scans; ``max_edges`` caps what is kept,
``max_rows`` what is decoded, and ``deadline`` the time spent. Any of them
hit → ``truncated`` says which; a missing or unreadable file raises
``IndexUnavailable`` (the pass logs it and degrades).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LINEAGE_FILE = "dbt.column_lineage.parquet"
COLUMNS_FILE = "dbt.node_columns.parquet"
INDEX_DIRS = ("index", "info_schema/v1")

# Accepted spellings of each logical column, first match wins.
_LINEAGE_COLUMNS = {
    "from_node": ("from_node_id", "from_unique_id", "from_node"),
    "to_node": ("to_node_id", "to_unique_id", "to_node"),
    "from_column": ("from_column", "from_column_name"),
    "to_column": ("to_column", "to_column_name"),
    "kind": ("lineage_kind", "kind"),
}
_NODE_COLUMNS = {
    "unique_id": ("unique_id", "node_id"),
    "column_name": ("column_name", "name"),
    "declared_type": ("declared_type",),
    "inferred_type": ("inferred_type",),
    "column_index": ("column_index", "ordinal_position"),
}
# The engine's lineage kinds → copy | mod | scan (unknown kinds count as mod: the value flows, changed).
KINDS = {
    "copy": "copy", "passthrough": "copy", "rename": "copy", "direct": "copy", "identity": "copy",
    "mod": "mod", "transform": "mod", "transformation": "mod", "expression": "mod", "aggregate": "mod", "aggregation": "mod",
    "scan": "scan", "filter": "scan", "join": "scan", "group_by": "scan", "indirect": "scan", "where": "scan", "order_by": "scan",
}  # fmt: skip


class IndexUnavailable(Exception):
    """The index is missing or unreadable; the message says which file and why."""


@dataclass
class IndexEdges:
    """(from node, from column, to node, to column | None, kind) per edge, direct ones first."""

    edges: list[tuple[str, str, str, str | None, str]] = field(default_factory=list)
    columns: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # node → [(name, type)] in order
    rows_read: int = 0
    truncated: str | None = None  # why the result is partial


def find_index(target: Path) -> Path | None:
    """The folder holding the lineage index under a target path, or None."""
    for sub in INDEX_DIRS:
        if (target / sub / LINEAGE_FILE).exists():
            return target / sub
    return None


def _names(schema_names: Iterable[str], wanted: Mapping[str, tuple[str, ...]], path: Path, required: tuple[str, ...]) -> dict[str, str]:
    present = set(schema_names)
    out = {}
    for logical, spellings in wanted.items():
        name = next((s for s in spellings if s in present), None)
        if name is not None:
            out[logical] = name
        elif logical in required:
            raise IndexUnavailable(f"{path.name} has no column {spellings[0]!r} (columns: {', '.join(sorted(present))})")
    return out


def _open(path: Path) -> Any:
    import pyarrow.parquet as pq

    if not path.exists():
        raise IndexUnavailable(f"{path} does not exist")
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # ArrowInvalid, OSError: a torn or foreign file
        raise IndexUnavailable(f"{path} is unreadable: {e}") from e


def read_index(
    folder: Path,
    nodes: Iterable[str],
    *,
    max_edges: int = 200_000,
    max_rows: int = 20_000_000,
    batch_rows: int = 65_536,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> IndexEdges:
    """Edges INTO ``nodes`` (the models just built) and their columns, within the caps."""
    import pyarrow as pa
    import pyarrow.compute as pc

    wanted = pa.array(sorted(set(nodes)), pa.string())
    out = IndexEdges()
    direct: list[tuple[str, str, str, str | None, str]] = []
    scans: list[tuple[str, str, str, str | None, str]] = []
    lineage = _open(folder / LINEAGE_FILE)
    cols = _names(lineage.schema_arrow.names, _LINEAGE_COLUMNS, folder / LINEAGE_FILE, ("from_node", "to_node", "from_column", "to_column"))
    try:
        for batch in lineage.iter_batches(batch_size=batch_rows, columns=list(cols.values())):
            out.rows_read += batch.num_rows
            if deadline is not None and clock() > deadline:
                out.truncated = f"time budget reached after {out.rows_read:,} index rows"
                break
            keep = pc.is_in(batch.column(cols["to_node"]).cast(pa.string()), value_set=wanted)
            rows = batch.filter(keep).to_pydict()
            kinds = rows[cols["kind"]] if "kind" in cols else [None] * len(rows[cols["to_node"]])
            for fn, fc, tn, tc, k in zip(rows[cols["from_node"]], rows[cols["from_column"]], rows[cols["to_node"]], rows[cols["to_column"]], kinds):
                kind = KINDS.get(str(k).lower(), "mod") if k is not None else "mod"
                edge = (str(fn), str(fc), str(tn), None if kind == "scan" else (str(tc) if tc is not None else None), kind)
                if kind == "scan":
                    if len(direct) + len(scans) < max_edges:
                        scans.append(edge)
                elif len(direct) < max_edges:
                    direct.append(edge)
                    if len(direct) + len(scans) > max_edges:
                        scans.pop()  # direct edges win over scans
                else:
                    out.truncated = out.truncated or f"more than {max_edges:,} edges into the built models; kept the first {max_edges:,} direct ones"
            if len(direct) >= max_edges and out.truncated is None:
                out.truncated = f"more than {max_edges:,} edges into the built models; kept the first {max_edges:,} direct ones"
            if out.rows_read >= max_rows:
                out.truncated = out.truncated or f"index larger than {max_rows:,} rows; read the first {out.rows_read:,}"
                break
    except IndexUnavailable:
        raise
    except Exception as e:  # a corrupt page mid-file
        raise IndexUnavailable(f"{folder / LINEAGE_FILE} is unreadable: {e}") from e
    out.edges = direct + list(dict.fromkeys(scans))
    out.columns = _read_columns(folder / COLUMNS_FILE, wanted, batch_rows) if (folder / COLUMNS_FILE).exists() else {}
    return out


def _read_columns(path: Path, wanted: Any, batch_rows: int) -> dict[str, list[tuple[str, str]]]:
    import pyarrow as pa
    import pyarrow.compute as pc

    f = _open(path)
    cols = _names(f.schema_arrow.names, _NODE_COLUMNS, path, ("unique_id", "column_name"))
    found: dict[str, list[tuple[int, str, str]]] = {}
    try:
        for batch in f.iter_batches(batch_size=batch_rows, columns=list(cols.values())):
            rows = batch.filter(pc.is_in(batch.column(cols["unique_id"]).cast(pa.string()), value_set=wanted)).to_pydict()
            n = len(rows[cols["unique_id"]])
            declared = rows.get(cols.get("declared_type", ""), [None] * n)
            inferred = rows.get(cols.get("inferred_type", ""), [None] * n)
            index = rows.get(cols.get("column_index", ""), list(range(n)))
            for u, c, d, i, pos in zip(rows[cols["unique_id"]], rows[cols["column_name"]], declared, inferred, index):
                found.setdefault(str(u), []).append((int(pos) if pos is not None else 1 << 30, str(c), str(d or i or "unknown")))
    except Exception as e:
        raise IndexUnavailable(f"{path} is unreadable: {e}") from e
    return {u: [(c, t) for _, c, t in sorted(v)] for u, v in found.items()}
