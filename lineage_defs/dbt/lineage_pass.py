"""The post-materialization lineage pass of a dbt build (SPEC section 8).

After the build, for the models it built:

1. an engine with static analysis (dbt Fusion) compiles again with
   ``--static-analysis strict`` into a target path of its own, and its parquet
   index is read (``index.py``);
2. dbt-core 1.x has no such analysis: the compiled SQL the build wrote
   (``<target>/compiled/<project>/<path>``) goes through the project's own SQL
   lineage (sqlglot), cached by the compiled SQL's hash; ``*`` expands against
   each model's real upstream columns (``BuiltModel.upstream_schemas``, which
   the run reads from the catalog, ``catalog.py``).

The pass is best-effort about itself: a wrong engine, a rejected analysis, a
missing/unreadable/oversized index or its time budget give partial or no
lineage and ``note`` (one log line) says which. It never raises an
``Exception``; a cancellation (``KeyboardInterrupt``, Dagster's interrupt,
both ``BaseException``) goes through and fails the run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lineage_defs.dbt.index import IndexUnavailable, find_index, read_index
from lineage_defs.dbt.model_lineage import model_edges
from lineage_defs.plan.spec import ColumnEdge, EdgeKind

CACHE_VERSION = "dbt-lineage-v1"


@dataclass(frozen=True)
class Engine:
    kind: str  # core (dbt-core 1.x: no static analysis) | static (writes the lineage index) | unknown
    version: str
    executable: str | None = None  # None: this interpreter's dbt-core


@dataclass(frozen=True)
class BuiltModel:
    unique_id: str
    uri: str
    path: str  # original_file_path inside the dbt project
    upstream_schemas: Mapping[str, Sequence[str]] = field(default_factory=dict)  # URI (as the compiled SQL names it) → real columns, for `*`


@dataclass
class PassResult:
    edges: dict[str, tuple[ColumnEdge, ...]] = field(default_factory=dict)  # model URI → edges into it
    columns: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # model URI → (name, type)
    source: str = ""  # "index" | "sqlglot" | "" (none)
    note: str | None = None  # the one log line when the result is partial or empty
    seconds: float = 0.0


def detect_engine(executable: str | None, timeout: float = 30.0) -> Engine:
    """What ``executable --version`` says it is (no subprocess for this interpreter's dbt-core)."""
    if executable is None:
        from importlib.metadata import version

        v = version("dbt-core")
        return Engine("core" if v.split(".")[0] in ("0", "1") else "unknown", v)
    try:
        done = subprocess.run([executable, "--version"], capture_output=True, text=True, timeout=timeout)
        text = f"{done.stdout}\n{done.stderr}"
    except (OSError, subprocess.SubprocessError) as e:
        return Engine("unknown", f"({e})", executable)
    m = re.search(r"(\d+\.\d+\.\d+\S*)", text)
    v = m.group(1) if m else "?"
    if "fusion" in text.lower():
        return Engine("static", v, executable)
    if "core" in text.lower() and v.startswith("1."):
        return Engine("core", v, executable)
    return Engine("unknown", v, executable)


class _SqlCache:
    """Compiled-SQL hash → edges, one JSON file per project (data only)."""

    def __init__(self, path: Path | None) -> None:
        self.path, self.entries, self.dirty = path, {}, False
        if path and path.exists():
            try:
                loaded = json.loads(path.read_text())
                self.entries = loaded if isinstance(loaded, dict) else {}
            except (OSError, ValueError, RecursionError):
                self.entries = {}

    def save(self) -> None:
        if not (self.path and self.dirty):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".lin-")
            with os.fdopen(fd, "w") as f:
                json.dump(self.entries, f)
            os.replace(tmp, self.path)
        except OSError:
            pass


def _sqlglot_lineage(
    models: Sequence[BuiltModel], compiled: Path, aliases: Mapping[str, str], cache: _SqlCache, deadline: float, clock: Callable[[], float], prelude: str = ""
) -> tuple[dict[str, tuple[ColumnEdge, ...]], dict[str, list[str]], str | None]:
    from lineage_defs.plan.sql import analyze_sql

    def resolve(uri: str) -> str:
        return aliases.get(uri, uri)

    edges: dict[str, tuple[ColumnEdge, ...]] = {}
    columns: dict[str, list[str]] = {}
    missing = 0
    fingerprint = hashlib.sha256(json.dumps(sorted(aliases.items())).encode()).hexdigest()[:16]
    for i, m in enumerate(models):
        if clock() > deadline:
            return edges, columns, f"time budget reached after {i} of {len(models)} models"
        sql = _compiled_sql(compiled / m.path)
        if sql is None:
            missing += 1
            continue
        sql = prelude + sql
        known = {u: list(c) for u, c in sorted(m.upstream_schemas.items())}
        key = hashlib.sha256(f"{CACHE_VERSION}\0{fingerprint}\0{m.uri}\0{json.dumps(known)}\0{sql}".encode()).hexdigest()[:32]
        hit = cache.entries.get(key)
        if hit is None:
            a = analyze_sql(sql, "duckdb", schemas=known or None)
            hit = {"edges": [[e.source, e.target, e.kind] for e in model_edges(m.uri, a.edges, resolve)], "columns": list(a.output_columns or [])}
            cache.entries[key] = hit
            cache.dirty = True
        edges[m.uri] = tuple(ColumnEdge(s, t, EdgeKind(k)) for s, t, k in hit["edges"])
        if hit["columns"]:
            columns[m.uri] = hit["columns"]
    note = f"no compiled SQL for {missing} of {len(models)} models" if missing else None
    return edges, columns, note


def _compiled_sql(path: Path) -> str | None:
    """A model's compiled SQL; a microbatch model has one file per batch in a folder named like it."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        pass
    batches = sorted(path.with_suffix("").glob("*.sql")) if path.with_suffix("").is_dir() else []
    return batches[0].read_text(encoding="utf-8") if batches else None


def _index_lineage(
    models: Sequence[BuiltModel], folder: Path, node_uris: Mapping[str, str], deadline: float, caps: Mapping[str, int]
) -> tuple[dict[str, tuple[ColumnEdge, ...]], dict[str, list[tuple[str, str]]], str | None]:
    by_id = {m.unique_id: m.uri for m in models}
    idx = read_index(folder, by_id, deadline=deadline, max_edges=caps.get("max_edges", 200_000), max_rows=caps.get("max_rows", 20_000_000))
    edges: dict[str, list[ColumnEdge]] = {}
    for fn, fc, tn, tc, kind in idx.edges:
        src = node_uris.get(fn)
        if src is None:  # a node outside the graph (e.g. an unselected package model)
            continue
        target = by_id[tn] if tc is None else f"{by_id[tn]}.{tc}"
        edges.setdefault(by_id[tn], []).append(ColumnEdge(f"{src}.{fc}", target, EdgeKind(kind)))
    columns = {by_id[u]: cols for u, cols in idx.columns.items() if u in by_id}
    return {u: tuple(dict.fromkeys(es)) for u, es in edges.items()}, columns, idx.truncated


StaticCompile = Callable[[Path, float], "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class LineagePass:
    """The pass over one build of one project; ``run(models, budget)`` never raises an ``Exception``.

    ``node_uris`` maps every dbt unique id (models and sources) to its asset
    URI, ``aliases`` the URIs the SQL analysis gives to dbt model URIs
    (``prelude`` declares a project's own databases to it).
    ``static_compile(target, timeout)`` runs the engine's strict compile into ``target``.
    """

    engine: Engine
    build_target: Path
    project_name: str
    node_uris: Mapping[str, str]
    aliases: Mapping[str, str]
    prelude: str = ""
    static_compile: StaticCompile | None = None
    cache_file: Path | None = None
    caps: Mapping[str, int] = field(default_factory=dict)
    clock: Callable[[], float] = time.monotonic

    def run(self, models: Sequence[BuiltModel], budget_seconds: float) -> PassResult:
        """Column lineage and columns of ``models`` after the build."""
        clock = self.clock
        start = clock()
        deadline = start + max(budget_seconds, 0.0)
        result = PassResult()
        if not models:
            return result
        notes: list[str] = []
        try:
            if self.engine.kind == "unknown":
                notes.append(f"wrong engine: {self.engine.executable or 'dbt'} {self.engine.version} has no static analysis and is not dbt-core")
            elif self.engine.kind == "static" and self.static_compile is not None:
                self._from_index(models, deadline, result, notes)
            if not result.source and self.engine.kind != "unknown":
                if clock() > deadline:
                    notes.append("time budget spent before the SQL analysis")
                else:
                    # dbt-core 1.x, or the index failed: sqlglot over the build's compiled SQL
                    cache = _SqlCache(self.cache_file)
                    compiled = self.build_target / "compiled" / self.project_name
                    edges, cols, note = _sqlglot_lineage(models, compiled, self.aliases, cache, deadline, clock, self.prelude)
                    cache.save()
                    result.edges, result.source = edges, "sqlglot"
                    result.columns = {u: [(c, "unknown") for c in cs] for u, cs in cols.items()}
                    if note:
                        notes.append(note)
        except subprocess.TimeoutExpired:
            notes.append("time budget reached during the static-analysis compile")
        except Exception as e:  # the pass must never fail the build
            notes.append(f"lineage pass failed: {type(e).__name__}: {e}")
        result.seconds = clock() - start
        result.note = "; ".join(notes) if notes else None
        return result

    def _from_index(self, models: Sequence[BuiltModel], deadline: float, result: PassResult, notes: list[str]) -> None:
        assert self.static_compile is not None
        with tempfile.TemporaryDirectory(prefix="lineage-dbt-analysis-") as own:
            done = self.static_compile(Path(own), max(deadline - self.clock(), 0.0))
            folder = find_index(Path(own))
            if done.returncode != 0:
                tail = " ".join((done.stdout + done.stderr).split())[-300:]
                notes.append(f"static analysis rejected (exit {done.returncode}): {tail}")
            elif folder is None:
                notes.append("the engine wrote no lineage index (looked in target/index/ and target/info_schema/v1/)")
            else:
                try:
                    edges, cols, truncated = _index_lineage(models, folder, self.node_uris, deadline, self.caps)
                    result.edges, result.columns, result.source = edges, cols, "index"
                    if truncated:
                        notes.append(f"lineage index: {truncated}")
                except IndexUnavailable as e:
                    notes.append(f"lineage index unusable: {e}")
