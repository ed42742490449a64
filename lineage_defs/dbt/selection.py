"""Which dbt nodes a run selects, and in what order: a project's multi-assets, a subset, the tests on
sources, the waves a build needs when dbt cannot see an edge. Pure.

dbt orders a build by ``ref()`` and ``source()`` edges. A source whose relation
is one of the project's own seeds or models is that node in the graph (one
asset), but to dbt it is a source: nothing makes it build the seed before the
model reading the source. Such an edge is *hidden*; a build with hidden edges
runs as several dbt invocations ("waves"), each node in the first wave after
every hidden upstream, each test in the wave of its last parent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from lineage_defs.dbt.project import DbtProject
from lineage_defs.dbt.relations import is_asset
from lineage_defs.plan.spec import DbtStep, DbtTest


def groups(steps: Sequence[DbtStep]) -> list[tuple[str, list[DbtStep]]]:
    """(op name suffix, steps): the unpartitioned models together, each microbatch model on its own."""
    plain = [s for s in steps if s.partitioning is None]
    out: list[tuple[str, list[DbtStep]]] = [("", plain)] if plain else []
    out.extend((f"__{s.uri.rsplit('/', 1)[-1]}", [s]) for s in steps if s.partitioning is not None)
    return out


def source_tests(steps: Sequence[DbtStep]) -> list[DbtTest]:
    """The tests on dbt sources these steps carry (checks of the assets the sources are)."""
    return [t for s in steps for t in s.tests if t.select]


def by_name(models: Sequence[DbtStep], tests: Sequence[DbtTest]) -> list[str]:
    """`--select` of these models by fqn, and of these source tests (a model's selection does not reach them)."""
    return ["--select", " ".join([f"fqn:{s.fqn}" for s in models] + [t.select for t in tests])]


def selection_args(project: DbtProject, group: Sequence[DbtStep], whole_project: bool) -> list[str]:
    """The dbt selection of a non-subset run of this group: lineage.yml's, or the group's models by name."""
    if whole_project:
        cfg = project.config
        if cfg.selector:
            return ["--selector", cfg.selector]
        return ["--select", cfg.select] + (["--exclude", cfg.exclude] if cfg.exclude else [])
    return by_name(group, source_tests(group))


def dbt_parents(unique_id: str, nodes: Mapping[str, Mapping[str, object]]) -> set[str]:
    """What ``unique_id`` reads as dbt sees it: models, seeds, snapshots and sources, through ephemeral models."""
    out: set[str] = set()
    queue = list(_depends_on(nodes.get(unique_id)))
    seen: set[str] = set()
    while queue:
        u = queue.pop()
        if u in seen:
            continue
        seen.add(u)
        node = nodes.get(u)
        if node is None:  # a source
            out.add(u)
            continue
        if node.get("resource_type") == "model" and not is_asset(node):
            queue.extend(_depends_on(node))
        else:
            out.add(u)
    return out


def _depends_on(node: Mapping[str, object] | None) -> list[str]:
    deps = (node or {}).get("depends_on") or {}
    return [str(u) for u in (deps.get("nodes") or [])] if isinstance(deps, Mapping) else []


def waves(
    steps: Sequence[DbtStep], tests: Iterable[DbtTest], nodes: Mapping[str, Mapping[str, object]], resolve: Callable[[str], str] = lambda u: u
) -> list[tuple[list[DbtStep], list[DbtTest]]]:
    """The steps and tests of a build in dbt invocations: one when dbt sees every edge between them.

    ``nodes`` are the manifest's nodes (depends_on); ``resolve`` maps a
    source's URI to the asset it is. A step reading another step through a
    source is in a later wave than it; a test runs in the wave of its last
    parent, or after it when dbt cannot see that parent (a test on a source
    that is a seed runs in the wave after the seed's).
    """
    by_uri = {s.uri: s for s in steps}
    by_id = {s.unique_id: s for s in steps}
    wave: dict[str, int] = {}

    def level(s: DbtStep, busy: frozenset[str] = frozenset()) -> int:
        if s.uri in wave:
            return wave[s.uri]
        if s.uri in busy:  # dbt refuses cycles; a hidden one is reported at load, never loops here
            return 0
        busy = busy | {s.uri}
        known = {by_id[u].uri for u in dbt_parents(s.unique_id, nodes) if u in by_id}
        w = 0
        for d in s.deps:
            parent = by_uri.get(d.uri)
            if parent is not None and parent.uri != s.uri:
                w = max(w, level(parent, busy) + (0 if parent.uri in known else 1))
        wave[s.uri] = w
        return w

    for s in steps:
        level(s)
    out: list[tuple[list[DbtStep], list[DbtTest]]] = [([], []) for _ in range(max(wave.values(), default=0) + 1)]
    for s in steps:
        out[wave[s.uri]][0].append(s)
    carrier = {t.unique_id: s for s in steps for t in s.tests}
    for t in tests:
        levels = [wave[by_id[u].uri] for u in _depends_on(nodes.get(t.unique_id)) if u in by_id]
        if t.asset and resolve(t.asset) in by_uri:  # a test on a source that is one of these nodes: after it
            levels.append(wave[resolve(t.asset)] + 1)
        if not levels and t.unique_id in carrier and not t.asset:
            levels = [wave[carrier[t.unique_id].uri]]
        at = max(levels, default=0)
        out.extend(([], []) for _ in range(at + 1 - len(out)))
        out[at][1].append(t)
    return [w for w in out if w[0] or w[1]]


def wave_args(models: Sequence[DbtStep], tests: Sequence[DbtTest], nodes: Mapping[str, Mapping[str, object]]) -> list[str]:
    """One wave's selection: its models and exactly its tests, by fqn (no test pulled in by adjacency)."""
    names = [f"fqn:{s.fqn}" for s in models]
    for t in tests:
        fqn = (nodes.get(t.unique_id) or {}).get("fqn")
        names.append(t.select or ("fqn:" + ".".join(str(p) for p in fqn) if isinstance(fqn, list) else f"fqn:{t.name}"))
    return ["--select", " ".join(names), "--indirect-selection", "empty"]


def topological(steps: Sequence[DbtStep]) -> list[DbtStep]:
    """The steps, every one after the steps it depends on (Dagster refuses an output yielded before its upstream)."""
    by_uri = {s.uri: s for s in steps}
    done: set[str] = set()
    seen: set[str] = set()  # expanded once: a cycle (reported at load) cannot loop here
    out: list[DbtStep] = []
    for root in steps:
        stack = [(root, False)]
        while stack:
            s, expanded = stack.pop()
            if s.uri in done:
                continue
            if expanded:
                done.add(s.uri)
                out.append(s)
                continue
            if s.uri in seen:
                continue
            seen.add(s.uri)
            stack.append((s, True))
            stack.extend((by_uri[d.uri], False) for d in reversed(s.deps) if d.uri in by_uri and d.uri not in seen)
    return out
