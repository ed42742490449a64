"""Column impact: every column downstream (or upstream) of one column, with the path that reaches it.

Built once per project from the plan's column edges (``Step.column_edges``,
scripts and dbt models alike): a ``copy``/``mod`` edge joins two columns, a
``scan`` edge joins a column to a whole asset (its rows: the column decides
which rows exist). A breadth-first walk gives each column reached its shortest
path (ties broken by the sorted order of the edges, so the answer is stable);
a walk stops at a scan (the asset's rows, ``column`` None). Upstream is the
exact reverse: the columns whose values a column is computed from.

Pure data in, pure data out: no Dagster, no sqlglot, no files.
"""

from __future__ import annotations

import difflib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from lineage_defs.errors import RunError
from lineage_defs.plan.spec import DbtStep, EdgeKind, Project, ScriptStep

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Hop:
    source: str  # "<uri>.<col>"
    target: str  # "<uri>.<col>", or "<uri>" for a scan
    kind: EdgeKind


@dataclass(frozen=True)
class TestRef:
    """A data test that reads a column: a script's ``data_test`` line or a dbt test."""

    __test__ = False  # not a pytest class

    asset: str  # the asset the test is attached to
    name: str  # the asset check's name
    path: str  # the file declaring it (relative to the pipelines folder)
    line: int | None  # None when unknown (a dbt test: its manifest records the YAML file, not the line)


@dataclass(frozen=True)
class Reached:
    asset: str
    column: str | None  # None: the asset's rows (reached by a scan)
    path: tuple[Hop, ...]
    readers: tuple[str, ...] = ()  # assets whose step reads this column
    tests: tuple[TestRef, ...] = ()
    dbt: bool = False

    @property
    def node(self) -> str:
        return f"{self.asset}.{self.column}" if self.column is not None else self.asset


@dataclass
class ColumnGraph:
    """The project's column edges, indexed both ways, plus who produces and tests what."""

    out_edges: dict[str, list[Hop]] = field(default_factory=dict)
    in_edges: dict[str, list[Hop]] = field(default_factory=dict)
    columns: dict[str, set[str]] = field(default_factory=dict)  # asset → its known columns
    tests: dict[str, list[TestRef]] = field(default_factory=dict)  # "<uri>.<col>" → tests reading it
    dbt_assets: set[str] = field(default_factory=set)
    sources: dict[str, str] = field(default_factory=dict)  # asset → the file producing it

    @classmethod
    def build(cls, project: Project) -> ColumnGraph:
        g = cls()
        for s in project.steps:
            for uri in s.outputs:
                g.sources[uri] = s.path
                g.columns.setdefault(uri, set()).update(s.output_columns or ())
                if isinstance(s, DbtStep):
                    g.dbt_assets.add(uri)
            for e in s.column_edges:
                hop = Hop(e.source, e.target, e.kind)
                g.out_edges.setdefault(e.source, []).append(hop)
                g.in_edges.setdefault(e.target, []).append(hop)
                src_uri, src_col = e.source.rsplit(".", 1)
                g.columns.setdefault(src_uri, set()).add(src_col)
                if e.kind is not EdgeKind.SCAN:
                    tgt_uri, tgt_col = e.target.rsplit(".", 1)
                    g.columns.setdefault(tgt_uri, set()).add(tgt_col)
            g._add_tests(s)
        for uri in project.externals:
            g.columns.setdefault(uri, set())
        for hops in (*g.out_edges.values(), *g.in_edges.values()):
            hops.sort(key=lambda h: (h.source, h.target, h.kind))
        return g

    def to_data(self) -> dict[str, object]:
        """Plain JSON-able data (``plan.impact_index`` stores it); ``from_data`` reverses it."""
        return {
            "edges": [[h.source, h.target, str(h.kind)] for hops in self.out_edges.values() for h in hops],
            "columns": {a: sorted(c) for a, c in self.columns.items()},
            "tests": {n: [[t.asset, t.name, t.path, t.line] for t in ts] for n, ts in self.tests.items()},
            "dbt_assets": sorted(self.dbt_assets),
            "sources": self.sources,
        }

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> ColumnGraph:
        g = cls(columns={a: set(c) for a, c in data["columns"].items()}, dbt_assets=set(data["dbt_assets"]), sources=dict(data["sources"]))
        kinds = {str(k): k for k in EdgeKind}
        for source, target, kind in data["edges"]:
            hop = Hop(source, target, kinds[kind])
            g.out_edges.setdefault(source, []).append(hop)
            g.in_edges.setdefault(target, []).append(hop)
        for hops in g.in_edges.values():
            hops.sort(key=lambda h: (h.source, h.target, h.kind))
        g.tests = {n: [TestRef(*t) for t in ts] for n, ts in data["tests"].items()}
        return g

    def _add_tests(self, s: ScriptStep | DbtStep) -> None:
        if isinstance(s, ScriptStep):
            for t in s.tests:
                line = t.at.line if t.at else None
                if t.column:
                    self._test(f"{s.uri}.{t.column}", TestRef(s.uri, t.name, s.path, line))
                if t.ref_uri and t.ref_column:  # relationships: reads the referenced column too
                    self._test(f"{t.ref_uri}.{t.ref_column}", TestRef(s.uri, t.name, s.path, line))
        else:
            for dt in s.tests:
                if dt.column:
                    self._test(f"{dt.asset or s.uri}.{dt.column}", TestRef(dt.asset or s.uri, dt.name, dt.path or s.path, dt.line or None))

    def _test(self, node: str, ref: TestRef) -> None:
        self.tests.setdefault(node, []).append(ref)

    # -- questions --------------------------------------------------------------------

    def resolve(self, spec: str) -> tuple[str, str]:
        """``<asset-uri>.<column>`` → (asset, column); an unknown one is a RunError with a guess."""
        asset, dot, column = spec.rpartition(".")
        if not dot or not asset or not column:
            raise RunError(f"'{spec}' is not <asset-uri>.<column>", fix="write e.g. ducklake://main/orders.amount_eur")
        if asset not in self.columns:
            guess = difflib.get_close_matches(asset, sorted(self.columns), n=1, cutoff=0.5)
            fix = f"did you mean {guess[0]}?" if guess else "lineage-defs graph lists every asset"
            raise RunError(f"no asset {asset} in the project", fix=fix)
        known = self.columns[asset]
        if column not in known:
            folded = {c.lower(): c for c in known}
            if column.lower() in folded:
                return asset, folded[column.lower()]
            guess = difflib.get_close_matches(column, sorted(known), n=1, cutoff=0.5)
            listing = ", ".join(sorted(known)) or "none known"
            fix = f"did you mean {asset}.{guess[0]}?" if guess else f"its known columns: {listing}"
            raise RunError(f"{asset} has no column '{column}' in the plan's lineage", fix=fix)
        return asset, column

    def readers(self, node: str) -> tuple[str, ...]:
        """The assets whose step reads ``node`` (any edge kind)."""
        out = {h.target if h.kind is EdgeKind.SCAN else h.target.rsplit(".", 1)[0] for h in self.out_edges.get(node, ())}
        return tuple(sorted(out))

    def reached(self, asset: str, column: str | None, path: tuple[Hop, ...]) -> Reached:
        node = f"{asset}.{column}" if column is not None else asset
        readers = self.readers(node) if column is not None else ()
        tests = tuple(sorted(set(self.tests.get(node, ())), key=lambda t: (t.asset, t.name))) if column is not None else ()
        return Reached(asset, column, path, readers, tests, asset in self.dbt_assets)

    def walk(self, asset: str, column: str, upstream: bool = False) -> list[Reached]:
        """Every column reached from ``asset.column`` (not itself), nearest first, each with its shortest path."""
        start = f"{asset}.{column}"
        paths: dict[str, tuple[Hop, ...]] = {start: ()}
        queue = deque([start])
        out: list[Reached] = []
        while queue:
            node = queue.popleft()
            for hop in (self.in_edges if upstream else self.out_edges).get(node, ()):
                nxt = hop.source if upstream else hop.target
                if nxt in paths:
                    continue
                path = (*paths[node], hop) if not upstream else (hop, *paths[node])
                paths[nxt] = path
                if hop.kind is EdgeKind.SCAN and not upstream:
                    out.append(self.reached(nxt, None, path))  # the asset's rows: the walk stops here
                    continue
                a, c = nxt.rsplit(".", 1)
                out.append(self.reached(a, c, path))
                queue.append(nxt)
        return sorted(out, key=lambda r: (len(r.path), r.asset, r.column is None, r.column or ""))


def as_json(graph: ColumnGraph, asset: str, column: str, upstream: bool, found: Sequence[Reached]) -> dict[str, object]:
    """The ``--json`` document (docs/impact.md describes it, field by field)."""

    def entry(r: Reached) -> dict[str, object]:
        return {
            "asset": r.asset,
            "column": r.column,
            "dbt": r.dbt,
            "source": graph.sources.get(r.asset),
            "depth": len(r.path),
            "path": [{"from": h.source, "to": h.target, "kind": str(h.kind)} for h in r.path],
            "readers": list(r.readers),
            "tests": [{"asset": t.asset, "name": t.name, "file": t.path, "line": t.line} for t in r.tests],
        }

    root = graph.reached(asset, column, ())
    return {"version": SCHEMA_VERSION, "direction": "upstream" if upstream else "downstream", "root": entry(root), "columns": [entry(r) for r in found]}


def render(graph: ColumnGraph, asset: str, column: str, upstream: bool, found: Iterable[Reached]) -> list[str]:
    """The text answer: the column with its readers and tests, then each column reached with its path below it."""
    found = list(found)
    word = "upstream" if upstream else "downstream"
    lines: list[str] = []
    for r in [graph.reached(asset, column, ()), *found]:
        marks = [m for m in ("dbt model" if r.dbt else "", "rows (scan)" if r.column is None else "") if m]
        lines.append(f"{'  ' if r.path else ''}{r.node}{'  [' + ', '.join(marks) + ']' if marks else ''}")
        if r.path:
            lines.append("      " + " ".join(f"{h.source} -{h.kind}-> {h.target}" if i == 0 else f"-{h.kind}-> {h.target}" for i, h in enumerate(r.path)))
        if r.readers:
            lines.append(f"      read by: {', '.join(r.readers)}")
        if r.tests:
            lines.append("      tested by: " + ", ".join(f"{t.name} ({t.path}:{t.line})" if t.line else f"{t.name} ({t.path})" for t in r.tests))
        if not r.path:
            lines.append(f"{len(found)} column{'s' * (len(found) != 1)} {word}:")
    return lines
