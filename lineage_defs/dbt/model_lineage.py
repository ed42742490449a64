"""Column lineage of dbt models from their SQL, with the project's own SQL analysis.

At load time a model's raw SQL is rendered with a minimal Jinja context
(``ref``, ``source``, ``var``, ``config``, ``is_incremental``, ``this``;
an ephemeral ``ref`` inlined as a subquery) — enough for plain models. One
that calls other macros (``adapter.dispatch``, ``dbt.date_trunc``) takes the
SQL dbt compiled for it when the manifest was parsed (``parse_main``); the
post-materialization pass (``lineage_pass.py``) feeds the build's compiled
SQL to the same ``model_edges``. No warehouse is queried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lineage_defs.plan.cache import content_hash
from lineage_defs.plan.spec import Analysis, ColumnEdge, DbtStep, EdgeKind, RawEdge

# (cache key of the model's inputs, render its SQL, known upstream columns) → its analysis, None if unrenderable
CachedAnalyze = Callable[[str, Callable[[], "str | None"], Mapping[str, Sequence[str]] | None], "Analysis | None"]


@dataclass(frozen=True)
class LineageInputs:
    """What rendering a project's model SQL needs, and how its analysis names relations."""

    refs: Mapping[str, str]  # model name → relation
    sources: Mapping[tuple[str, str], str]  # (source, table) → relation
    vars: Mapping[str, Any]
    key: str  # content hash of all of the above: part of every model's cache key
    prelude: str  # SQL declaring the project's own databases to the analysis
    own: Mapping[str, str]  # URIs the analysis gives the project's own relations → asset URIs
    ephemerals: Mapping[str, str] = field(default_factory=dict)  # ephemeral model name → raw SQL (inlined)
    compiled: Mapping[str, str] = field(default_factory=dict)  # unique id → SQL dbt compiled at parse time (macros)


def render(
    sql: str,
    node_relation: str,
    refs: Mapping[str, str],
    sources: Mapping[tuple[str, str], str],
    dbt_vars: Mapping[str, Any],
    ephemerals: Mapping[str, str] | None = None,
    depth: int = 0,
) -> str | None:
    """Raw model SQL → SQL, or None when it needs more of dbt than this context has.

    A ``ref()`` to an ephemeral model (``ephemerals``: name → raw SQL) is
    inlined as a subquery, the way dbt inlines it as a CTE.
    """
    import jinja2

    def ref(*args: str, **_: Any) -> str:
        name = args[-1]
        if name not in refs and ephemerals and name in ephemerals and depth < 20:
            inner = render(ephemerals[name], node_relation, refs, sources, dbt_vars, ephemerals, depth + 1)
            if inner is None:
                raise KeyError(name)
            return f"({inner.strip().rstrip(';')})"
        return refs[name]

    def source(source_name: str, table: str) -> str:
        return sources[(source_name, table)]

    def var(name: str, default: Any = None) -> Any:
        if name not in dbt_vars and default is None:
            raise KeyError(name)
        return dbt_vars.get(name, default)

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.do"])
    try:
        return env.from_string(sql).render(
            ref=ref, source=source, var=var, this=node_relation,
            config=lambda *a, **k: "", is_incremental=lambda: False,
            env_var=lambda name, default="": default,
        )  # fmt: skip
    except Exception:  # a macro, an unknown ref, a syntax only dbt knows
        return None


def model_edges(uri: str, raw: Iterable[RawEdge], resolve: Callable[[str], str]) -> tuple[ColumnEdge, ...]:
    """The model's column edges from analysis edges, upstream URIs mapped to assets."""
    edges = []
    for e in raw:
        target = uri if e.target_column is None else f"{uri}.{e.target_column}"
        edges.append(ColumnEdge(f"{resolve(e.source_uri)}.{e.source_column}", target, EdgeKind(e.kind)))
    return tuple(dict.fromkeys(edges))


def with_lineage(
    steps: Sequence[DbtStep],
    projects: Mapping[str, LineageInputs],
    schemas: dict[str, tuple[str, ...]],
    aliases: Mapping[str, str],
    resolve: Callable[[str], str],
    analyze: CachedAnalyze,
) -> list[DbtStep]:
    """dbt steps with load-time column lineage, upstream models first (for ``*``)."""
    by_uri = {s.uri: s for s in steps}
    back = {v: k for k, v in aliases.items()}
    order: list[DbtStep] = []
    state: dict[str, int] = {}

    def visit(s: DbtStep) -> None:  # iterative enough: dbt graphs are DAGs (dbt refuses cycles)
        stack = [(s, iter(s.deps))]
        state[s.uri] = 1
        while stack:
            node, it = stack[-1]
            dep = next(it, None)
            if dep is None:
                state[node.uri] = 2
                order.append(node)
                stack.pop()
            elif dep.uri in by_uri and not state.get(dep.uri):
                state[dep.uri] = 1
                stack.append((by_uri[dep.uri], iter(by_uri[dep.uri].deps)))

    for s in steps:
        if not state.get(s.uri):
            visit(s)
    # each model's other names (how its readers' SQL names it), looked up per model
    names_of: dict[str, list[str]] = {}
    for uri, alias in back.items():
        names_of.setdefault(uri, []).append(alias)
    own_names: dict[str, dict[str, list[str]]] = {}
    out: dict[str, DbtStep] = {}
    for s in order:
        found = projects.get(s.project)
        if found is None or not s.sql:
            out[s.uri] = s
            continue
        info: LineageInputs = found
        rendered: list[str | None] = []

        def sql(_s: DbtStep = s, _i: LineageInputs = info) -> str | None:  # rendered once, only on a cache miss
            if not rendered:
                # a model calling macros: the SQL dbt compiled when the manifest was parsed
                text = render(_s.sql, _s.relation, _i.refs, _i.sources, _i.vars, _i.ephemerals) or _i.compiled.get(_s.unique_id)
                rendered.append(_i.prelude + text if text is not None else None)
            return rendered[0]

        # the model's SQL, its relation, everything its refs/sources/vars can render to, what dbt compiled
        key = content_hash("dbt-model", info.key, s.relation, s.sql, info.compiled.get(s.unique_id, ""))
        a = analyze(key, sql, None)
        if a is None:
            out[s.uri] = s
            continue
        known = {u: schemas[u] for u in a.needs_schemas if u in schemas}
        if known:  # `*` or unqualified columns over upstreams whose columns are known
            a = analyze(key, sql, known) or a
        cols = a.output_columns if a.output_columns is not None else s.output_columns

        def resolved(uri: str, _own: Mapping[str, str] = info.own) -> str:  # the project's own database first
            return _own.get(uri) or resolve(uri)

        out[s.uri] = replace(s, column_edges=model_edges(s.uri, a.edges, resolved), output_columns=cols)
        if cols:
            schemas[s.uri] = tuple(cols)
            if s.project not in own_names:
                own_names[s.project] = {}
                for alias, model in info.own.items():
                    own_names[s.project].setdefault(model, []).append(alias)
            for alias in (*names_of.get(s.uri, ()), *own_names[s.project].get(s.uri, ())):
                schemas[alias] = tuple(cols)  # also under the name the SQL of its readers uses
    return [out[s.uri] for s in steps]
