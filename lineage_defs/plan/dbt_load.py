"""Every dbt project of a pipelines folder, loaded for the plan: steps, relation aliases, errors."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lineage_defs.errors import LineageDefsError
from lineage_defs.plan.cache import PlanCache, content_hash
from lineage_defs.plan.dbt import DbtProject, dbt_steps, discover_dbt, load_dbt_project, own_catalogs, relation_aliases
from lineage_defs.plan.dbt_lineage import with_lineage
from lineage_defs.plan.dbt_manifest import DbtEnv
from lineage_defs.plan.spec import Analysis, Dep, Problem, StepSpec


@dataclass(frozen=True)
class DbtLoad:
    steps: tuple[StepSpec, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)  # script-side URI → dbt model URI
    projects: tuple[DbtProject, ...] = ()
    errors: tuple[LineageDefsError, ...] = ()
    lineage_inputs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per project: refs, sources, vars
    pipelines: frozenset[str] = frozenset()  # pipelines holding a dbt project (valid or not)

    def with_lineage(
        self,
        schemas: dict[str, tuple[str, ...]],
        resolve: Callable[[str], str],
        analyze: Callable[[str, Mapping[str, Sequence[str]] | None], Analysis],
        cache: PlanCache,
    ) -> list[StepSpec]:
        """The dbt steps with deps resolved and load-time column lineage (cached: a warm load renders nothing)."""
        if not self.steps:
            return []

        def cached(base: str, sql: Callable[[], str | None], known: Mapping[str, Sequence[str]] | None) -> Analysis | None:
            key = content_hash(base, repr(sorted((k, tuple(v)) for k, v in (known or {}).items())))
            hit = cache.get(key, Analysis)
            if hit is None:
                text = sql()
                hit = analyze(text, known) if text is not None else _UNRENDERABLE
                cache.put(key, hit)
            return None if hit == _UNRENDERABLE else hit

        steps = [replace(s, deps=tuple(dict.fromkeys(Dep(resolve(d.uri), d.explicit) for d in s.deps))) for s in self.steps]
        return with_lineage(steps, self.lineage_inputs, schemas, self.aliases, resolve, cached)


# Cached for a model whose SQL needs more of dbt than load-time rendering has (its lineage comes from the run).
_UNRENDERABLE = Analysis(trailing_select=False, problems=(Problem("dbt SQL not renderable at load time", 0, 0, None),))


def load_dbt(root: Path, skip: set[str], cache_dir: Path | None, env: DbtEnv | None) -> DbtLoad:
    """Discover, parse (cached) and plan every dbt project under ``root``."""
    found = list(discover_dbt(root, skip))
    if not found:
        return DbtLoad()
    env = env or DbtEnv(str(cache_dir.parent if cache_dir else Path(".lineage")))
    errors: list[LineageDefsError] = []
    loaded: list[tuple[DbtProject, Mapping[str, Any]]] = []
    for pipeline, folder in found:
        project, nodes, errs = load_dbt_project(root, pipeline, folder, env, cache_dir)
        errors.extend(errs)
        if project is not None:
            loaded.append((project, nodes))
    names: set[str] = set()
    steps, errs = dbt_steps(loaded, names)
    errors.extend(errs)
    inputs = {p.path: _lineage_inputs(p, nodes) for p, nodes in loaded}
    return DbtLoad(tuple(steps), relation_aliases(steps), tuple(p for p, _ in loaded), tuple(errors), inputs, frozenset(p for p, _ in found))


def _lineage_inputs(project: DbtProject, nodes: Mapping[str, Any]) -> dict[str, Any]:
    """What rendering a model's SQL needs: relation names of refs and sources, and vars."""
    refs = {}
    for n in nodes["nodes"].values():
        if n["resource_type"] in ("model", "seed", "snapshot") and n.get("relation_name"):
            refs[n["name"]] = n["relation_name"]
    sources = {(s["source_name"], s["name"]): s["relation_name"] for s in nodes["sources"].values() if s.get("relation_name")}
    prelude, aliases = own_catalogs(project)
    inputs = content_hash(json.dumps(sorted(refs.items())), json.dumps(sorted(sources.items())), project.config.vars_json, prelude)
    return {"refs": refs, "sources": sources, "vars": json.loads(project.config.vars_json or "{}"), "inputs": inputs, "prelude": prelude, "aliases": aliases}

