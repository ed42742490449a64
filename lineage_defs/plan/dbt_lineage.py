"""Column lineage of dbt models from their SQL, with the project's own SQL analysis.

At load time a model's raw SQL is rendered with a minimal Jinja context
(``ref``, ``source``, ``var``, ``config``, ``is_incremental``, ``this``) —
enough for plain models; one that calls other macros gets its lineage from
the post-materialization pass instead (``run/dbt_lineage.py``), which feeds
the compiled SQL to the same ``model_edges``. No warehouse is queried.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lineage_defs.plan.cache import content_hash
from lineage_defs.plan.spec import Analysis, ColumnEdge, StepSpec

# (cache key of the model's inputs, render its SQL, known upstream columns) → its analysis, None if unrenderable
Analyze = Callable[[str, Callable[[], "str | None"], Mapping[str, Sequence[str]] | None], "Analysis | None"]


def render(sql: str, node_relation: str, refs: Mapping[str, str], sources: Mapping[tuple[str, str], str], dbt_vars: Mapping[str, Any]) -> str | None:
    """Raw model SQL → SQL, or None when it needs more of dbt than this context has."""
    import jinja2

    def ref(*args: str, **_: Any) -> str:
        return refs[args[-1]]

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


def model_edges(uri: str, raw: Iterable[Any], resolve: Callable[[str], str]) -> tuple[ColumnEdge, ...]:
    """The model's column edges from analysis edges (``RawEdge``-like), upstream URIs mapped to assets."""
    edges = []
    for e in raw:
        target = uri if e.target_column is None else f"{uri}.{e.target_column}"
        edges.append(ColumnEdge(f"{resolve(e.source_uri)}.{e.source_column}", target, e.kind))
    return tuple(dict.fromkeys(edges))


def with_lineage(
    steps: Sequence[StepSpec],
    projects: Mapping[str, Mapping[str, Any]],
    schemas: dict[str, tuple[str, ...]],
    aliases: Mapping[str, str],
    resolve: Callable[[str], str],
    analyze: Analyze,
) -> list[StepSpec]:
    """dbt steps with load-time column lineage, upstream models first (for ``*``)."""
    by_uri = {s.uri: s for s in steps}
    back = {v: k for k, v in aliases.items()}
    order: list[StepSpec] = []
    state: dict[str, int] = {}

    def visit(s: StepSpec) -> None:  # iterative enough: dbt graphs are DAGs (dbt refuses cycles)
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
    own_names: dict[int, dict[str, list[str]]] = {}
    out: dict[str, StepSpec] = {}
    for s in order:
        node = s.dbt
        info = projects.get(node.project) if node else None
        if node is None or info is None or not node.sql:
            out[s.uri] = s
            continue
        rendered: list[str | None] = []
        inputs: Mapping[str, Any] = info

        def sql(_n: Any = node, _i: Mapping[str, Any] = inputs) -> str | None:  # rendered once, only on a cache miss
            if not rendered:
                text = render(_n.sql, _n.relation, _i["refs"], _i["sources"], _i["vars"])
                rendered.append(_i["prelude"] + text if text is not None else None)
            return rendered[0]

        # the model's SQL, its relation and everything its refs/sources/vars can render to
        key = content_hash("dbt-model", info["inputs"], node.relation, node.sql)
        a = analyze(key, sql, None)
        if a is None:
            out[s.uri] = s
            continue
        known = {u: schemas[u] for u in a.needs_schemas if u in schemas}
        if known:  # `*` or unqualified columns over upstreams whose columns are known
            a = analyze(key, sql, known) or a
        cols = a.output_columns if a.output_columns is not None else s.output_columns
        own: Mapping[str, str] = inputs["aliases"]

        def resolved(uri: str, _own: Mapping[str, str] = own) -> str:  # the project's own database first
            return _own.get(uri) or resolve(uri)

        out[s.uri] = replace(s, column_edges=model_edges(s.uri, a.edges, resolved), output_columns=cols)
        if cols:
            schemas[s.uri] = tuple(cols)
            if id(own) not in own_names:
                own_names[id(own)] = {}
                for alias, model in own.items():
                    own_names[id(own)].setdefault(model, []).append(alias)
            for alias in (*names_of.get(s.uri, ()), *own_names[id(own)].get(s.uri, ())):
                schemas[alias] = tuple(cols)  # also under the name the SQL of its readers uses
    return [out[s.uri] for s in steps]

