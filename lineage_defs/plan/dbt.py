"""dbt projects in the pipelines folder → ``StepSpec``s of strategy ``dbt`` (SPEC section 8).

Each model, seed and snapshot a project selects becomes one step whose output
is ``dbt://<database>/<schema>/<alias>``; its upstreams are the models and
sources it depends on, a source mapped to the script asset that holds its
relation (``lake.main.t`` IS ``ducklake://main/t``). ``relation_aliases``
gives the other direction: the URI a script's SQL names when it reads a
model's relation (``warehouse.main.store_daily`` → ``duckdb://warehouse/store_daily``),
mapped to the model's asset so there is one node and one edge.

Plain data, no Dagster. The manifest comes from ``plan/dbt_manifest.py``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.parse.model import Partitioning
from lineage_defs.plan.dbt_config import DbtConfig, parse_lineage_yml
from lineage_defs.plan.dbt_manifest import DbtEnv, parse_project, profiles_dir

# dbt-duckdb's default profile names the warehouse file `warehouse` and attaches the main lake as `lake`.
DEFAULT_CATALOGS = {"warehouse": "duckdb://warehouse", "lake": "ducklake://main"}
_BATCH_KINDS = {"hour": "hourly", "day": "daily", "month": "monthly"}
_ASSET_TYPES = ("model", "seed", "snapshot")


@dataclass(frozen=True)
class DbtTest:
    name: str  # the asset check's name (dagster-dbt's convention: the test's name)
    unique_id: str
    severity: str  # error | warn
    # a test on a dbt source: the URI of the asset the source is (a script's table) and the
    # selector that makes dbt run the test (a model's selection does not reach it)
    asset: str = ""
    select: str = ""


@dataclass(frozen=True)
class Microbatch:
    event_time: str
    batch_size: str  # hour | day | month | year
    begin: str
    lookback: int = 1


@dataclass(frozen=True)
class DbtNode:
    """What makes a step a dbt node: where it comes from and how it runs."""

    unique_id: str
    project: str  # the dbt project folder, relative to the pipelines folder
    relation: str  # database.schema.alias
    resource_type: str  # model | seed | snapshot
    materialized: str
    tests: tuple[DbtTest, ...] = ()
    microbatch: Microbatch | None = None
    sql: str = ""  # raw SQL (jinja) of a model, for load-time lineage
    fqn: str = ""  # dbt's fully qualified name, for selecting it
    default_profile: bool = True


@dataclass(frozen=True)
class DbtProject:
    """One dbt project folder: how to invoke dbt on it and what it builds."""

    path: str  # relative to the pipelines folder (posix)
    pipeline: str
    name: str  # dbt's project name
    profiles_dir: str
    default_profile: bool  # the embedded default (no profiles.yml in the project)
    config: DbtConfig
    manifest_path: str  # slim manifest.json for dagster-dbt
    key: str  # content hash of the project's files
    unique_ids: tuple[str, ...] = ()  # selected models/seeds/snapshots
    test_ids: tuple[str, ...] = field(default=())
    node_uris: tuple[tuple[str, str], ...] = ()  # every model/seed/snapshot/source unique id → asset URI


def discover_dbt(root: Path, skip: set[str]) -> Iterator[tuple[str, Path]]:
    """(pipeline, folder) for every folder holding ``dbt_project.yml`` under a pipeline sub-folder."""
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        if sub.name.startswith(".") or sub.name in skip:
            continue
        stack = [sub]
        while stack:
            folder = stack.pop()
            if (folder / "dbt_project.yml").exists():
                yield sub.name, folder
                continue
            stack.extend(sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith(".") and p.name not in skip), reverse=True))


def load_dbt_project(root: Path, pipeline: str, folder: Path, env: DbtEnv, cache_dir: Path | None) -> tuple[DbtProject | None, dict[str, Any], list[LineageDefsError]]:
    """One project: its lineage.yml, the generated default profile if needed, the cached manifest."""
    rel = folder.relative_to(root).as_posix()
    errors: list[LineageDefsError] = []
    config = DbtConfig()
    yml = folder / "lineage.yml"
    if yml.exists():
        config, errs = parse_lineage_yml(f"{rel}/lineage.yml", yml.read_text(encoding="utf-8"))
        errors.extend(errs)
        if errs:
            return None, {}, errors
    try:
        profiles, is_default = profiles_dir(folder, env, config.threads)
    except Exception as e:  # a dbt_project.yml that is not YAML
        return None, {}, [SpecError(f"cannot read dbt_project.yml: {e}", Location(f"{rel}/dbt_project.yml", 1), "fix the YAML")]
    parsed, errs = parse_project(folder, rel, profiles, config.cli_args(), cache_dir, (config.select, config.exclude, config.selector))
    errors.extend(errs)
    if parsed is None:
        return None, {}, errors
    nodes = parsed.nodes
    selected = nodes.get("selected")
    chosen = set(selected) if selected is not None else None
    ids = tuple(u for u, n in nodes["nodes"].items() if n["resource_type"] in _ASSET_TYPES and _is_asset(n) and (chosen is None or u in chosen))
    tests = tuple(u for u, n in nodes["nodes"].items() if n["resource_type"] == "test" and (chosen is None or u in chosen))
    node_uris = tuple(
        [(u, model_uri(n)) for u, n in nodes["nodes"].items() if n["resource_type"] in _ASSET_TYPES]
        + [(u, source_uri(src, is_default)) for u, src in nodes["sources"].items()]
    )
    project = DbtProject(
        path=rel,
        pipeline=pipeline,
        name=str(nodes.get("project_name") or folder.name),
        profiles_dir=str(profiles),
        default_profile=is_default,
        config=config,
        manifest_path=parsed.manifest_path,
        key=parsed.key,
        unique_ids=ids,
        test_ids=tests,
        node_uris=node_uris,
    )
    return project, nodes, errors


def _is_asset(node: Mapping[str, Any]) -> bool:
    cfg = node.get("config") or {}
    return cfg.get("materialized") != "ephemeral" and cfg.get("enabled", True) is not False


def model_uri(node: Mapping[str, Any]) -> str:
    """``dbt://<database>/<schema>/<alias>`` of a model, seed or snapshot."""
    return uris.normalize(f"dbt://{node['database']}/{node['schema']}/{node.get('alias') or node['name']}")


def _table_uri(substrate: str, schema: str, name: str) -> str:
    """The URI sqlglot analysis gives ``<catalog>.<schema>.<name>`` on a substrate."""
    return uris.normalize(f"{substrate}/{name if schema == 'main' else f'{schema}.{name}'}")


def source_uri(source: Mapping[str, Any], default_profile: bool) -> str:
    """A source's asset: the script asset holding its relation on the embedded default, else ``dbt://…``."""
    db, schema, ident = source["database"], source["schema"], source.get("identifier") or source["name"]
    if default_profile and db in DEFAULT_CATALOGS:
        return _table_uri(DEFAULT_CATALOGS[db], schema, ident)
    return uris.normalize(f"dbt://{db}/{schema}/{ident}")


def script_uri(node: DbtNode) -> str | None:
    """The URI a script's SQL names when it reads this node's relation (embedded default only)."""
    database, schema, name = node.relation.split(".", 2)
    if node.default_profile and database in DEFAULT_CATALOGS:
        return _table_uri(DEFAULT_CATALOGS[database], schema, name)
    return None


def relation_aliases(steps: Sequence[Any]) -> dict[str, str]:
    """Script-side URI of each dbt step's relation → the step's asset URI."""
    out: dict[str, str] = {}
    for s in steps:
        alias = script_uri(s.dbt) if s.dbt is not None else None
        if alias:
            out[alias] = s.uri
    return out


def own_catalogs(project: DbtProject) -> tuple[str, dict[str, str]]:
    """For a project on its own profile: SQL declaring its databases, and their relations → assets.

    The analysis knows the embedded catalogs (``lake``, ``warehouse``); a
    project's own database (``own.main.base``) is declared to it with an
    ``ATTACH`` prelude, and the URI the analysis then gives
    (``duckdb://own/base``) maps back to the node (``dbt://own/main/base``).
    Only for the project's own lineage: scripts keep their meaning of ``duckdb://``.
    """
    if project.default_profile:
        return "", {}
    databases: set[str] = set()
    aliases: dict[str, str] = {}
    for _, uri in project.node_uris:
        u = uris.parse(uri)
        if u.kind == "dbt":
            databases.add(u.authority)
            aliases[_table_uri(f"duckdb://{u.authority}", u.path[0], u.path[1])] = uri
    prelude = "".join(f"ATTACH 'duckdb://{db}' AS \"{db}\";\n" for db in sorted(databases))
    return prelude, aliases


def _batch(node: Mapping[str, Any]) -> Microbatch | None:
    cfg = node.get("config") or {}
    if cfg.get("materialized") != "incremental" or cfg.get("incremental_strategy") != "microbatch":
        return None
    return Microbatch(str(cfg.get("event_time") or ""), str(cfg.get("batch_size") or "day"), str(cfg.get("begin") or ""), int(cfg.get("lookback") or 1))


def _partitioning(mb: Microbatch, where: Location, errors: list[LineageDefsError]) -> Partitioning | None:
    kind = _BATCH_KINDS.get(mb.batch_size)
    if kind is None:
        errors.append(SpecError(f"microbatch batch_size '{mb.batch_size}' has no Dagster partitions here", where, "use batch_size hour, day or month"))
        return None
    if not mb.begin:
        errors.append(SpecError("a microbatch model needs 'begin'", where, "set begin='2025-01-01' in the model's config"))
        return None
    start = mb.begin.replace("T", " ").split(" ")[0] if kind != "hourly" else mb.begin.replace(" ", "T")[:13] + ":00"
    return Partitioning(kind, start=start)


def _upstreams(node: Mapping[str, Any], nodes: Mapping[str, Any], sources: Mapping[str, Any], uri_of: Callable[[str], str | None]) -> list[str]:
    """Upstream asset URIs; through ephemeral models to their parents."""
    out: list[str] = []
    queue = list((node.get("depends_on") or {}).get("nodes", []))
    seen: set[str] = set()
    while queue:
        u = queue.pop(0)
        if u in seen:
            continue
        seen.add(u)
        parent = nodes.get(u)
        if parent is not None and parent["resource_type"] == "model" and not _is_asset(parent):
            queue.extend((parent.get("depends_on") or {}).get("nodes", []))
            continue
        uri = uri_of(u)
        if uri and uri not in out:
            out.append(uri)
    return out


def dbt_steps(projects: Sequence[tuple[DbtProject, Mapping[str, Any]]], names: set[str]) -> tuple[list[Any], list[LineageDefsError]]:
    """One ``StepSpec`` per selected model/seed/snapshot (deps not yet resolved through script aliases)."""
    from lineage_defs.plan.spec import Dep, StepSpec
    from lineage_defs.plan.steps import op_name

    errors: list[LineageDefsError] = []
    steps: list[Any] = []
    for project, nodes in projects:
        all_nodes, sources = nodes["nodes"], nodes["sources"]
        uri_of = dict(project.node_uris).get

        tests_of: dict[str, list[DbtTest]] = {}
        on_sources: list[DbtTest] = []  # checks on the assets the sources are, run with the project's models
        if project.config.test_behavior != "none":
            for t in project.test_ids:
                tn = all_nodes[t]
                attached = tn.get("attached_node") or next(iter((tn.get("depends_on") or {}).get("nodes", [])), None)
                severity = str((tn.get("config") or {}).get("severity") or "error").lower()
                if attached and attached in sources:
                    on_sources.append(DbtTest(tn["name"], t, severity, asset=uri_of(attached) or "", select="fqn:" + ".".join(tn.get("fqn") or [tn["name"]])))
                elif attached:
                    tests_of.setdefault(attached, []).append(DbtTest(tn["name"], t, severity))
        # the project's first unpartitioned model carries them (its multi-asset has no partitions to mismatch)
        carrier = next((u for u in project.unique_ids if not _batch(all_nodes[u])), None)
        if carrier is not None:
            tests_of.setdefault(carrier, []).extend(t for t in on_sources if t.asset)
        for u in project.unique_ids:
            node = all_nodes[u]
            rel = f"{project.path}/{node['original_file_path']}"
            where = Location(rel, 1)
            mb = _batch(node)
            part = _partitioning(mb, where, errors) if mb else None
            uri = model_uri(node)
            sql = node.get("raw_code", "") if node["resource_type"] == "model" and node.get("language", "sql") == "sql" else ""
            steps.append(
                StepSpec(
                    name=op_name(project.pipeline, f"{project.pipeline}/dbt__{node['name']}", names),
                    pipeline=project.pipeline,
                    path=rel,
                    language="dbt",
                    description=node.get("description") or f"dbt {node['resource_type']} {node['name']} ({project.name}).",
                    outputs=(uri,),
                    materialize=None,
                    strategy="dbt",
                    deps=tuple(Dep(d, False) for d in _upstreams(node, all_nodes, sources, uri_of) if d != uri),
                    partitioning=part,
                    tags=tuple(str(t) for t in node.get("tags") or ()),
                    output_columns=tuple(node["columns"]) if node.get("columns") else None,
                    content_hash=hashlib.sha256(f"{project.key}\0{u}".encode()).hexdigest()[:32],
                    dbt=DbtNode(
                        unique_id=u,
                        project=project.path,
                        relation=f"{node['database']}.{node['schema']}.{node.get('alias') or node['name']}",
                        resource_type=node["resource_type"],
                        materialized=str((node.get("config") or {}).get("materialized") or node["resource_type"]),
                        tests=tuple(tests_of.get(u, ())),
                        microbatch=mb,
                        sql=sql,
                        fqn=".".join(node.get("fqn") or [node["name"]]),
                        default_profile=project.default_profile,
                    ),
                )
            )
    return steps, errors


def project_op_name(project: DbtProject) -> str:
    """The Dagster op name of a project's multi-asset."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{project.pipeline}__dbt__{project.name}")
