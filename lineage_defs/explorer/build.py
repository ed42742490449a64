"""``lineage-defs docs build``: the plan (and the instance's last runs) → a static site, the assets' JSON in small files.

The page (``static/``) loads ``data/index.json`` — every asset's URI, file and
columns, for the search — and then only the file of the asset it shows
(``data/a/<shard>.json``: the assets whose URI hashes there, a few per file). The
graph of an asset page is its neighbourhood, read from its own file (each
column's edges in and out name the neighbours' columns). Clicking a column
walks the edges from file to file (``static/app.js``), with the rules of
``plan.impact.ColumnGraph.walk`` — the files hold exactly that graph's edges
(``ColumnGraph.build``), so the highlighted columns are what
``lineage-defs impact`` answers. Nothing loads from the network: the graph
library is vendored in ``static/vendor`` with its licence.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lineage_defs import uris
from lineage_defs.errors import RunError
from lineage_defs.explorer.instance import LastRun
from lineage_defs.parse.model import Language
from lineage_defs.plan.canonical import planned_types
from lineage_defs.plan.impact import ColumnGraph
from lineage_defs.plan.spec import AnyStep, DbtStep, Project, ScriptStep
from lineage_defs.settings import LineageSettings

VERSION = 1
MARKER = "lineage-explorer.json"
TYPES_CACHE = "explorer-types-v1.json"  # a folder holding it is a site this command built (and may rebuild)


@dataclass(frozen=True)
class Built:
    assets: int
    columns: int
    edges: int
    seconds: float


def shard_of(uri: str) -> str:
    """The file under ``data/a/`` holding the asset (one of 256, by a hash of its URI: stable across builds).

    Thousands of one-asset files cost more to write (and a long walk more
    requests to fetch) than a few hundred of some kilobytes each.
    """
    return hashlib.sha1(uri.encode()).hexdigest()[:2]


def dagster_url(ui_url: str, uri: str) -> str:
    """The asset's page in the Dagster UI (its key under ``/assets/``)."""
    return f"{ui_url.rstrip('/')}/assets/{'/'.join(quote(p, safe='') for p in uris.key_path(uri))}"


def build_site(project: Project, out: Path, settings: LineageSettings, last: Mapping[str, LastRun] | None = None) -> Built:
    """Write the site into ``out`` (created; a previous build there is replaced)."""
    t0 = time.perf_counter()
    _prepare(out)
    graph = ColumnGraph.build(project)
    last = last or {}
    steps: dict[str, AnyStep] = {u: s for s in project.steps for u in s.outputs}
    upstream: dict[str, list[str]] = {u: sorted({d.uri for d in s.deps}) for u, s in steps.items()}
    downstream: dict[str, set[str]] = {}
    for s in project.steps:
        for d in s.deps:
            downstream.setdefault(d.uri, set()).add(s.uri)
    tests = _tests(project)
    types = _Types(settings.cache_dir)
    data = out / "data" / "a"
    data.mkdir(parents=True)
    index: list[list[Any]] = []
    shards: dict[str, dict[str, Any]] = {}
    n_columns = 0
    for uri in sorted(set(graph.columns) | set(steps) | set(project.externals)):
        step = steps.get(uri)
        kind = "dbt" if isinstance(step, DbtStep) else "script" if step is not None else "external"
        cols = _columns(uri, step, graph)
        n_columns += len(cols)
        doc = _asset(uri, kind, step, cols, graph, settings, last.get(uri), tests.get(uri, []), upstream.get(uri, []), sorted(downstream.get(uri, ())), types.of(uri, step))
        shards.setdefault(shard_of(uri), {})[uri] = doc
        index.append([uri, shard_of(uri), kind, cols])
    for name, docs in shards.items():
        (data / f"{name}.json").write_text(json.dumps(docs, separators=(",", ":")))
    types.save()
    head = {
        "version": VERSION,
        "built": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime()),
        "folder": str(settings.pipelines_dir),
        "ui_url": settings.ui_link,
        "instance": bool(last),
        "errors": [e.render() for e in project.errors],
        "assets": index,
    }
    (out / "data" / "index.json").write_text(json.dumps(head, separators=(",", ":")))
    edges = sum(len(h) for h in graph.out_edges.values())
    (out / MARKER).write_text(json.dumps({"version": VERSION, "assets": len(index), "columns": n_columns, "edges": edges}))
    return Built(len(index), n_columns, edges, time.perf_counter() - t0)


def _prepare(out: Path) -> None:
    if out.exists():
        if not out.is_dir():
            raise RunError(f"{out} is a file, not a folder", fix="give `lineage-defs docs build` a folder to write the site into")
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise RunError(f"{out} is not empty and holds no site built by lineage-defs", fix="give an empty or new folder (a previous build there is replaced)")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    static = resources.files("lineage_defs.explorer") / "static"
    with resources.as_file(static) as src:
        shutil.copytree(src, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("README.md"))


def _columns(uri: str, step: AnyStep | None, graph: ColumnGraph) -> list[str]:
    """The step's planned output columns in their order, then any other column the lineage names."""
    planned = list(step.output_columns or ()) if step is not None and step.uri == uri else []
    seen = set(planned)
    return planned + sorted(c for c in graph.columns.get(uri, ()) if c not in seen)


class _Types:
    """The types each script's SQL spells out (casts, literals): what the plan knows before a run.

    sqlglot over every script is most of a build's time: kept in the state
    dir's cache by the step's content hash (a changed script is typed again).
    """

    def __init__(self, cache_dir: Path | None) -> None:
        self.path = cache_dir / TYPES_CACHE if cache_dir is not None else None
        self.known: dict[str, dict[str, str]] = {}
        self.used: dict[str, dict[str, str]] = {}
        if self.path is not None and self.path.exists():
            try:
                self.known = dict(json.loads(self.path.read_text()))
            except (OSError, ValueError, TypeError):  # corrupt: type again
                self.known = {}

    def of(self, uri: str, step: AnyStep | None) -> dict[str, str]:
        if not isinstance(step, ScriptStep) or step.uri != uri or not step.language.is_sql or not step.statements:
            return {}
        key = step.content_hash or hashlib.sha256(step.path.encode() + b"\0" + "".join(s.sql for s in step.statements).encode()).hexdigest()
        found = self.known.get(key)
        if found is None:
            dialect = "postgres" if step.language is Language.POSTGRES else "duckdb"
            found = planned_types(";\n".join(s.sql for s in step.statements if s.kind == "query"), dialect)
        self.used[key] = found
        return found

    def save(self) -> None:
        if self.path is None or self.used == self.known:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.used, separators=(",", ":")))
            tmp.replace(self.path)
        except OSError:  # a read-only state dir: build anyway
            pass


def _tests(project: Project) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for s in project.steps:
        if isinstance(s, ScriptStep):
            for t in s.tests:
                out.setdefault(s.uri, []).append({"name": t.name, "column": t.column, "severity": str(t.severity.value), "file": s.path, "line": t.at.line if t.at else 0})
        else:
            for dt in s.tests:
                out.setdefault(dt.asset or s.uri, []).append({"name": dt.name, "column": dt.column or None, "severity": str(dt.severity.value), "file": dt.path or s.path, "line": dt.line})
    return out


def _asset(
    uri: str,
    kind: str,
    step: AnyStep | None,
    cols: list[str],
    graph: ColumnGraph,
    settings: LineageSettings,
    last: LastRun | None,
    tests: list[dict[str, Any]],
    upstream: list[str],
    downstream: list[str],
    planned: dict[str, str],
) -> dict[str, Any]:
    recorded = last.types if last is not None else {}
    p = step.partitioning if step is not None else None
    return {
        "uri": uri,
        "kind": kind,
        "description": step.description if step is not None else "An input the steps read that no step produces.",
        "source": step.path if step is not None else None,
        "pipeline": step.pipeline if step is not None else None,
        "strategy": str(step.strategy.value) if step is not None else None,
        "owners": list(getattr(step, "owners", ())),
        "tags": list(step.tags) if step is not None else [],
        "partitions": {"kind": str(p.kind.value), "start": p.start, "tz": p.tz} if p is not None else None,
        "relation": step.relation if isinstance(step, DbtStep) else None,
        "dagster_url": dagster_url(settings.ui_link, uri),
        "last": {"status": last.status, "time": last.timestamp, "run_id": last.run_id, "partition": last.partition, "run_url": f"{settings.ui_link.rstrip('/')}/runs/{last.run_id}"} if last is not None else None,
        "columns": [{"name": c, "type": recorded.get(c) or planned.get(c.lower()), "typed_by": "last run" if c in recorded else "plan" if c.lower() in planned else None} for c in cols],
        "tests": tests,
        "upstream": upstream,
        "downstream": downstream,
        # the column graph's edges at this asset (ColumnGraph.out_edges / in_edges): [other node, kind]
        "out": {c: [[h.target, str(h.kind)] for h in graph.out_edges.get(f"{uri}.{c}", ())] for c in cols if f"{uri}.{c}" in graph.out_edges},
        "in": {c: [[h.source, str(h.kind)] for h in graph.in_edges.get(f"{uri}.{c}", ())] for c in cols if f"{uri}.{c}" in graph.in_edges},
        "scans": [[h.source, str(h.kind)] for h in graph.in_edges.get(uri, ())],  # columns deciding which rows exist
    }
