"""Every dbt project of a pipelines folder, loaded for the plan: steps, relation aliases, errors."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.dbt.model_lineage import LineageInputs, with_lineage
from lineage_defs.dbt.nodes import dbt_steps, relation_aliases
from lineage_defs.dbt.project import DbtProject, discover, open_project
from lineage_defs.dbt.relations import own_catalogs
from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.plan.cache import PlanCache, content_hash
from lineage_defs.plan.spec import Analysis, DbtStep, Dep, Problem, ScriptStep
from lineage_defs.settings import LineageSettings

# (SQL, known upstream columns) → the SQL's analysis: the plan's own SQL analysis, handed in
Analyze = Callable[[str, Mapping[str, Sequence[str]] | None], Analysis]


@dataclass(frozen=True)
class DbtLoad:
    steps: tuple[DbtStep, ...] = ()
    aliases: Mapping[str, str] = field(default_factory=dict)  # script-side URI → dbt model URI
    projects: tuple[DbtProject, ...] = ()
    errors: tuple[LineageDefsError, ...] = ()
    lineage_inputs: Mapping[str, LineageInputs] = field(default_factory=dict)  # per project path
    pipelines: frozenset[str] = frozenset()  # pipelines holding a dbt project (valid or not)
    warnings: tuple[LineageDefsError, ...] = ()  # models dbt could not compile at load time

    def catalogs(self) -> tuple[str, ...]:
        """The databases of projects on their own profile, as scripts' SQL names them."""
        return tuple(sorted({db for p in self.projects for db in p.own_databases}))

    def fingerprint(self) -> str:
        """A hash of everything the plan takes from the dbt projects (part of the plan snapshot's key)."""
        if not (self.steps or self.projects or self.errors or self.pipelines):
            return ""
        inputs = [
            (path, i.key, i.prelude, sorted(i.own.items()), sorted(i.ephemerals.items()), sorted(i.compiled.items()))
            for path, i in sorted(self.lineage_inputs.items())
        ]
        problems = [(type(e).__name__, e.message, e.location, e.fix, e.severity) for e in (*self.errors, *self.warnings)]
        return content_hash(repr((self.steps, sorted(self.aliases.items()), self.projects, problems, sorted(self.pipelines), inputs)))

    def attach_databases(self, step: ScriptStep, errors: list[LineageDefsError]) -> ScriptStep:
        """A script reading a project's own database attaches its DuckDB file; one scripts cannot reach is a located error."""
        owners = {db: p for p in self.projects for db in p.own_databases}
        attach: dict[str, str] = {}
        for d in step.deps if owners else ():
            db = uris.parse(d.uri).authority if uris.kind_of(d.uri) == uris.Kind.DBT else ""
            project = owners.get(db)
            if project is None:
                continue
            files = dict(project.database_files)
            if db in files:
                attach[db] = files[db]
                continue
            target = {"duckdb": "a DuckDB that is no local file (in memory, MotherDuck)", "": "a target lineage_defs cannot read"}.get(project.adapter, f"a {project.adapter} target")
            errors.append(SpecError(
                f"reads {d.uri}, a relation of the dbt project {project.path}, which builds into {target} that scripts cannot attach",
                _located(step, db, d.line), f"give {project.path}/profiles.yml a DuckDB file target (path: {db}.duckdb), or read a model built on the embedded default",
            ))  # fmt: skip
        return replace(step, attach=tuple(sorted(attach.items()))) if attach else step

    def with_lineage(self, schemas: dict[str, tuple[str, ...]], resolve: Callable[[str], str], analyze: Analyze, cache: PlanCache) -> list[DbtStep]:
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

        # a source whose relation is a seed's, a model's (of any project) or a script's table IS that
        # asset: its readers depend on it and its tests are checks of it, one node
        steps = [
            replace(
                s,
                deps=tuple(dict.fromkeys(Dep(resolve(d.uri), d.explicit) for d in s.deps if resolve(d.uri) != s.uri)),
                tests=tuple(replace(t, asset=resolve(t.asset)) if t.asset else t for t in s.tests),
            )
            for s in self.steps
        ]
        return with_lineage(steps, self.lineage_inputs, schemas, self.aliases, resolve, cached)


def _located(step: ScriptStep, catalog: str, line: int) -> Location:
    """Where the script names ``catalog.``: its first statement that does, else the read's line."""
    pattern = re.compile(rf"\b{re.escape(catalog)}\s*\.", re.IGNORECASE)
    for st in step.statements:
        m = pattern.search(st.sql)
        if m:
            before = st.sql[: m.start()]
            text = st.sql.splitlines()[before.count("\n")] if st.sql else ""
            return Location(step.path, st.line + before.count("\n"), m.start() - (before.rfind("\n") + 1) + 1, text, len(catalog))
    return Location(step.path, line or 1, 1)


# Cached for a model whose SQL needs more of dbt than load-time rendering has (its lineage comes from the run).
_UNRENDERABLE = Analysis(trailing_select=False, problems=(Problem("dbt SQL not renderable at load time", 0, 0, None),))


def load_dbt(root: Path, skip: set[str], settings: LineageSettings) -> DbtLoad:
    """Discover, parse (cached) and plan every dbt project under ``root``."""
    found = list(discover(root, skip))
    if not found:
        return DbtLoad()
    errors: list[LineageDefsError] = []
    loaded: list[tuple[DbtProject, Mapping[str, Any]]] = []
    for pipeline, folder in found:
        opened = open_project(root, pipeline, folder, settings)
        errors.extend(opened.errors)
        if opened.project is not None:
            loaded.append((opened.project, opened.nodes))
    steps, errs = dbt_steps(loaded, set())
    errors.extend(errs)
    aliases = relation_aliases(steps)
    projects: list[tuple[DbtProject, Mapping[str, Any]]] = []
    for project, nodes in loaded:
        prelude, own = own_catalogs(project.node_uris, project.default_profile)
        lineage_aliases = tuple(sorted({**aliases, **own}.items()))
        projects.append((replace(project, lineage_prelude=prelude, lineage_aliases=lineage_aliases), nodes))
    inputs = {p.path: _lineage_inputs(p, nodes) for p, nodes in projects}
    warnings = [w for p, nodes in projects for w in _uncompiled_warnings(p, nodes)]
    return DbtLoad(tuple(steps), aliases, tuple(p for p, _ in projects), tuple(errors), inputs, frozenset(p for p, _ in found), tuple(warnings))


def _uncompiled_warnings(project: DbtProject, nodes: Mapping[str, Any]) -> list[LineageDefsError]:
    """A warning per model of the project whose macros dbt could not compile without a database (load-time lineage lacks it)."""
    out: list[LineageDefsError] = []
    own = set(project.unique_ids)
    for uid, reason in sorted((nodes.get("compile_failed") or {}).items()):
        node = nodes["nodes"].get(uid)
        if node is None or uid not in own:
            continue
        out.append(SpecError(
            f"dbt model {node['name']} cannot be compiled at load time ({reason}): a macro it calls queries the database while compiling, "
            "so its column lineage is known only after a build; the project's other models are compiled without it",
            Location(f"{project.path}/{node.get('original_file_path') or node['name']}", 1, 1),
            "nothing to do if lineage after a build is enough; else compute the queried value in the model's SQL or a var",
            severity="warning",
        ))  # fmt: skip
    return out


def _lineage_inputs(project: DbtProject, nodes: Mapping[str, Any]) -> LineageInputs:
    """What rendering a model's SQL needs: relation names of refs and sources, and vars."""
    refs = {}
    for n in nodes["nodes"].values():
        if n["resource_type"] in ("model", "seed", "snapshot") and n.get("relation_name"):
            refs[n["name"]] = n["relation_name"]
    sources = {(s["source_name"], s["name"]): s["relation_name"] for s in nodes["sources"].values() if s.get("relation_name")}
    ephemerals = {n["name"]: n.get("raw_code", "") for n in nodes["nodes"].values() if n["resource_type"] == "model" and (n.get("config") or {}).get("materialized") == "ephemeral"}
    _, own = own_catalogs(project.node_uris, project.default_profile)
    key = content_hash(json.dumps(sorted(refs.items())), json.dumps(sorted(sources.items())), json.dumps(sorted(ephemerals.items())), project.config.vars_json, project.lineage_prelude)
    compiled = dict(nodes.get("compiled") or {})
    return LineageInputs(refs, sources, json.loads(project.config.vars_json or "{}"), key, project.lineage_prelude, own, ephemerals, compiled)
