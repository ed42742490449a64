"""Column schema and column lineage as Dagster metadata, readable in the open-source UI.

The OSS UI does not render ``dagster/column_lineage``, so each column's upstream
columns (with their kind) also go into the Columns table's descriptions and a
markdown entry of their own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetKey,
    CodeReferencesMetadataValue,
    LocalFileCodeReference,
    MetadataValue,
    TableColumn,
    TableColumnDep,
    TableColumnLineage,
    TableSchema,
)

from lineage_defs import uris
from lineage_defs.plan.spec import MANAGED_DESCRIPTIONS, AnyStep, ColumnEdge, EdgeKind

KEY_FN = Callable[[str], AssetKey]
# Marks the node Dagster draws for an input the steps read but none produces (metadata of the readers' AssetDeps).
EXTERNAL = "lineage/external"


def dagster_kind(uri: str) -> str:
    """The Dagster kind of the substrate an asset URI names (``uris.Kind.dagster_kind``)."""
    return uris.Kind(uri.partition("://")[0]).dagster_kind


def kinds(step: AnyStep) -> set[str]:
    """Dagster kinds: the engine that runs the step plus the substrates it writes."""
    return {step.language.value, *(dagster_kind(uri) for uri in step.outputs)}


def asset_metadata(step: AnyStep, uri: str, root: Path, translator: Any) -> dict[str, Any]:
    """Definition metadata of one output: URI, script, strategy, code reference; column schema and lineage on the primary one."""
    meta: dict[str, Any] = {
        "lineage/uri": uri,
        "lineage/script": step.path,
        "lineage/strategy": step.strategy.value,
    }
    meta["dagster/code_references"] = code_reference(os.path.join(root, step.path))
    if uri != step.uri:
        return meta
    table = uris.table_name(uri)
    if table:
        meta["dagster/table_name"] = table
    split = edges_into(uri, step.column_edges)  # once for the three entries (thousands of dbt models per load)
    schema = column_schema(uri, step.output_columns, step.column_edges, split=split)
    if schema:
        meta["dagster/column_schema"] = schema
    lineage = column_lineage(uri, step.column_edges, translator.asset_key, split=split, dep=getattr(translator, "column_dep", None))
    if lineage:
        meta["dagster/column_lineage"] = lineage
    table_md = lineage_markdown(uri, step.column_edges, split=split)
    if table_md:
        meta["lineage/column_lineage"] = table_md
    return meta


def code_reference(path: str) -> CodeReferencesMetadataValue:
    """``dagster/code_references`` to line 1 of the script at ``path``: the UI links the asset to its source.

    Both classes are pydantic models of a beta API whose validated constructor warns on
    every call; built from a ``str`` and an ``int`` of ours, ``model_construct`` makes the
    same value (``tests/test_metadata.py`` compares them) at a fifth of the cost, which a
    2,000-script load paid twice over (about 1.5 % of it).
    """
    return CodeReferencesMetadataValue.model_construct(code_references=[LocalFileCodeReference.model_construct(file_path=path, line_number=1)])


Split = tuple[dict[str, list[ColumnEdge]], list[ColumnEdge]]


def edges_into(uri: str, edges: Sequence[ColumnEdge]) -> Split:
    """(edges by output column, scan edges) of the asset ``uri``."""
    by_col: dict[str, list[ColumnEdge]] = {}
    scans: list[ColumnEdge] = []
    for e in edges:
        if e.target == uri:
            scans.append(e)
        elif e.target.startswith(uri + "."):
            by_col.setdefault(e.target[len(uri) + 1 :], []).append(e)
    return by_col, scans


def column_lineage(
    uri: str, edges: Sequence[ColumnEdge], key: KEY_FN, split: Split | None = None, dep: Callable[[str], TableColumnDep] | None = None
) -> TableColumnLineage | None:
    """``dagster/column_lineage``: copy and mod edges only (a scan reaches every column).
    ``dep``: an edge source's ``TableColumnDep`` (``CachedKeys.column_dep`` shares one per upstream column)."""
    by_col, _ = split or edges_into(uri, edges)
    dep = dep or (lambda source: column_dep(key, source))
    deps = {col: [dep(e.source) for e in es if e.kind != EdgeKind.SCAN] for col, es in by_col.items()}
    deps = {c: d for c, d in deps.items() if d}
    return TableColumnLineage(deps_by_column=deps) if deps else None


def column_dep(key: KEY_FN, source: str) -> TableColumnDep:
    """The upstream column ``source`` (``<uri>.<column>``) as Dagster names it."""
    uri, _, column = source.rpartition(".")
    return TableColumnDep(asset_key=key(uri), column_name=column)


def column_schema(
    uri: str,
    columns: Sequence[str] | None,
    edges: Sequence[ColumnEdge],
    types: Mapping[str, str] | None = None,
    split: Split | None = None,
) -> TableSchema | None:
    """``dagster/column_schema`` whose descriptions carry each column's lineage."""
    by_col, _ = split or edges_into(uri, edges)
    names = list(columns) if columns is not None else list(by_col)
    if not names:
        return None
    return TableSchema(
        columns=[
            TableColumn(
                name=c,
                type=(types or {}).get(c, "unknown"),
                description="; ".join(f"{e.kind} ← {e.source}" for e in by_col.get(c, [])) or MANAGED_DESCRIPTIONS.get(c),
            )
            for c in names
        ]
    )


def lineage_markdown(uri: str, edges: Sequence[ColumnEdge], split: Split | None = None) -> MetadataValue | None:
    """A table of every edge into ``uri`` with its kind; scans listed once for the whole row."""
    by_col, scans = split or edges_into(uri, edges)
    if not by_col and not scans:
        return None
    rows = ["| column | kind | from |", "|---|---|---|"]
    for col in sorted(by_col):
        for e in by_col[col]:
            rows.append(f"| `{col}` | {e.kind} | `{e.source}` |")
    for e in scans:
        rows.append(f"| *(whole row)* | scan | `{e.source}` |")
    return MetadataValue.md("\n".join(rows))


def edges_json(uri: str, edges: Sequence[ColumnEdge]) -> MetadataValue:
    by_col, scans = edges_into(uri, edges)
    flat = [e for es in by_col.values() for e in es] + scans
    return MetadataValue.json([{"from": e.source, "to": e.target, "kind": e.kind} for e in flat])
