"""A dbt project's manifest nodes → ``DbtStep``s (SPEC section 8). Plain data, no Dagster.

Each model, seed and snapshot a project selects becomes one step whose output
is ``dbt://<database>/<schema>/<alias>``; its upstreams are the models and
sources it depends on, a source mapped to the script asset that holds its
relation (``relations.source_uri``). Tests become the step's checks; tests on
sources are carried by the project's first unpartitioned model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from lineage_defs.dbt.config import TestBehavior
from lineage_defs.dbt.project import DbtProject
from lineage_defs.dbt.relations import is_asset, model_uri, relation_of, script_uri
from lineage_defs.errors import LineageDefsError, Location, SpecError
from lineage_defs.parse.model import PartitionKind, Partitioning, Severity
from lineage_defs.plan.names import op_name
from lineage_defs.plan.spec import DbtStep, DbtTest, Dep, Microbatch

_BATCH_KINDS = {"hour": PartitionKind.HOURLY, "day": PartitionKind.DAILY, "month": PartitionKind.MONTHLY}


def relation_aliases(steps: Iterable[DbtStep]) -> dict[str, str]:
    """Script-side URI of each dbt step's relation → the step's asset URI."""
    out: dict[str, str] = {}
    for s in steps:
        alias = script_uri(s.relation, s.default_profile)
        if alias:
            out[alias] = s.uri
    return out


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
    start = mb.begin.replace("T", " ").split(" ")[0] if kind is not PartitionKind.HOURLY else mb.begin.replace(" ", "T")[:13] + ":00"
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
        if parent is not None and parent["resource_type"] == "model" and not is_asset(parent):
            queue.extend((parent.get("depends_on") or {}).get("nodes", []))
            continue
        uri = uri_of(u)
        if uri and uri not in out:
            out.append(uri)
    return out


def _severity(test: Mapping[str, Any]) -> Severity:
    return Severity.WARN if str((test.get("config") or {}).get("severity") or "error").lower() == "warn" else Severity.ERROR


def dbt_steps(projects: Sequence[tuple[DbtProject, Mapping[str, Any]]], names: set[str]) -> tuple[list[DbtStep], list[LineageDefsError]]:
    """One ``DbtStep`` per selected model/seed/snapshot (deps not yet resolved through script aliases)."""
    errors: list[LineageDefsError] = []
    steps: list[DbtStep] = []
    for project, nodes in projects:
        all_nodes, sources = nodes["nodes"], nodes["sources"]
        uri_of = dict(project.node_uris).get

        tests_of: dict[str, list[DbtTest]] = {}
        on_sources: list[DbtTest] = []  # checks on the assets the sources are, run with the project's models
        if project.config.test_behavior is not TestBehavior.NONE:
            for t in project.test_ids:
                tn = all_nodes[t]
                attached = tn.get("attached_node")  # what the test checks (manifest.checked_node); None: no node alone
                column = str(tn.get("column_name") or "")
                yml = f"{project.path}/{tn['original_file_path']}" if tn.get("original_file_path") else ""
                if attached and attached in sources:
                    on_sources.append(DbtTest(tn["name"], t, _severity(tn), asset=uri_of(attached) or "", select="fqn:" + ".".join(tn.get("fqn") or [tn["name"]]), column=column, path=yml))
                elif attached:
                    tests_of.setdefault(attached, []).append(DbtTest(tn["name"], t, _severity(tn), column=column, path=yml))
        # the project's first unpartitioned model carries them (its multi-asset has no partitions to mismatch)
        carrier = next((u for u in project.unique_ids if not _batch(all_nodes[u])), None)
        if carrier is not None:
            tests_of.setdefault(carrier, []).extend(t for t in on_sources if t.asset)
        for u in project.unique_ids:
            node = all_nodes[u]
            rel = f"{project.path}/{node['original_file_path']}"
            mb = _batch(node)
            uri = model_uri(node)
            steps.append(
                DbtStep(
                    name=op_name(project.pipeline, f"{project.pipeline}/dbt__{node['name']}", names),
                    pipeline=project.pipeline,
                    path=rel,
                    description=node.get("description") or f"dbt {node['resource_type']} {node['name']} ({project.name}).",
                    outputs=(uri,),
                    deps=tuple(Dep(d, False) for d in _upstreams(node, all_nodes, sources, uri_of) if d != uri),
                    partitioning=_partitioning(mb, Location(rel, 1, 1), errors) if mb else None,
                    tags=tuple(str(t) for t in node.get("tags") or ()),
                    output_columns=tuple(node["columns"]) if node.get("columns") else None,
                    # the model's own code (manifest.code_versions) and the project's vars
                    content_hash=hashlib.sha256(f"{node.get('code_version') or project.key + u}\0{project.config.vars_json}".encode()).hexdigest()[:32],
                    unique_id=u,
                    project=project.path,
                    relation=relation_of(node),
                    resource_type=node["resource_type"],
                    materialized=str((node.get("config") or {}).get("materialized") or node["resource_type"]),
                    tests=tuple(tests_of.get(u, ())),
                    microbatch=mb,
                    sql=node.get("raw_code", "") if node["resource_type"] == "model" and node.get("language", "sql") == "sql" else "",
                    fqn=".".join(node.get("fqn") or [node["name"]]),
                    default_profile=project.default_profile,
                )
            )
    return steps, errors
