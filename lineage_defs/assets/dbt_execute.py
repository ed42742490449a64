"""Run a dbt project's multi-asset: dbt through dagster-dbt, then the lineage pass.

Imported only when a dbt asset runs (dagster-dbt and dbt cost seconds to
import). dagster-dbt's event stream reports each built model and each test,
mapped to the plan's keys by a translator; the models' outputs are held until
the lineage pass has run, so each carries its column schema and column
lineage (read back like a script's). The embedded DuckDB files admit one
writing process: a project on the default profile holds the state lock while
dbt runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import AssetCheckEvaluation, AssetCheckKey, AssetCheckResult, AssetKey, AssetMaterialization, AssetSpec, Output
from dagster_dbt import DagsterDbtTranslator, DagsterDbtTranslatorSettings, DbtCliResource

from lineage_defs.assets import metadata as md
from lineage_defs.assets.dbt import by_name, source_tests
from lineage_defs.assets.execute import run_settings
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.plan.dbt import DbtProject, own_catalogs, relation_aliases
from lineage_defs.plan.spec import Project, StepSpec
from lineage_defs.run.dbt_lineage import BuiltModel, PassResult, detect_engine, lineage_pass
from lineage_defs.run.dbt_run import MAX_RUNTIME_TAG, dbt_commands, pass_budget
from lineage_defs.run.substrates import StateLock


def _executable(resource: Any) -> str:
    return resource.dbt_executable or str(Path(sys.executable).parent / "dbt")


class LineageDbtTranslator(DagsterDbtTranslator):
    """dagster-dbt's translator over the plan's keys: a dbt node's key is its step's URI key."""

    def __init__(self, keys: Mapping[str, AssetKey]) -> None:
        # tests on sources report as checks on the assets the sources are (the plan declares them)
        super().__init__(settings=DagsterDbtTranslatorSettings(enable_source_tests_as_checks=True))
        self.keys = keys

    def get_asset_key(self, dbt_resource_props: Mapping[str, Any]) -> AssetKey:
        key = self.keys.get(dbt_resource_props.get("unique_id", ""))
        if key is not None:
            return key
        p = dbt_resource_props
        return AssetKey(["dbt", str(p.get("database") or "dbt"), str(p.get("schema") or "main"), str(p.get("alias") or p.get("identifier") or p["name"])])

    def get_asset_spec(self, manifest: Mapping[str, Any], unique_id: str, project: Any) -> AssetSpec:
        # dagster-dbt only needs a node's key when it reports events; the specs come from the plan
        props = manifest["nodes"].get(unique_id) or manifest["sources"].get(unique_id) or {"unique_id": unique_id, "name": unique_id}
        return AssetSpec(key=self.get_asset_key(props))


def execute_dbt(
    context: Any, project: DbtProject, steps: Sequence[StepSpec], plan: Project, translator: LineageTranslator, selection: list[str]
) -> Iterator[Any]:
    resource = context.resources.lineage
    settings = run_settings(resource)
    project_dir = Path(settings.pipelines_dir) / project.path
    dbt = DbtCliResource(project_dir=str(project_dir), profiles_dir=project.profiles_dir, dbt_executable=_executable(resource))
    window = None
    if any(s.partitioning is not None for s in steps) and (context.has_partition_key or context.has_partition_key_range):
        tw = context.partition_time_window
        window = (tw.start, tw.end)

    keys = {u: translator.asset_key(uri) for u, uri in project.node_uris}
    keys.update({s.dbt.unique_id: translator.asset_key(s.uri) for s in steps if s.dbt})
    dbt_translator = LineageDbtTranslator(keys)
    manifest = json.loads(Path(project.manifest_path).read_text())
    by_key = {translator.asset_key(s.uri): s for s in steps}
    wanted_checks = set(context.selected_asset_check_keys)
    if set(context.selected_asset_keys) != set(by_key):  # a subset: the selected models by name, and selected source tests
        chosen = [by_key[k] for k in context.selected_asset_keys if k in by_key]
        tests = [t for t in source_tests(steps) if AssetCheckKey(translator.asset_key(t.asset), t.name) in wanted_checks]
        selection = by_name(chosen, tests)

    # 1. dbt, holding the state lock on the embedded default
    outputs: dict[str, Output[Any]] = {}
    checks: list[AssetCheckResult] = []
    failure: BaseException | None = None
    lock = StateLock(settings) if project.default_profile else contextlib.nullcontext()
    build_target = _target_path(project, project_dir, context)
    with lock, _lake_env(settings.to_env() if project.default_profile else {}):
        for args in dbt_commands(project.config, window, selection):
            context.log.info(f"dbt {' '.join(args)}")
            invocation = dbt.cli(args, manifest=manifest, dagster_dbt_translator=dbt_translator, raise_on_error=False, target_path=build_target)
            for event in invocation.stream():
                if isinstance(event, AssetMaterialization) and event.asset_key in by_key:
                    name = event.asset_key.to_python_identifier()
                    outputs[name] = Output(value=None, output_name=name, metadata=dict(event.metadata))
                elif isinstance(event, AssetCheckEvaluation):
                    if AssetCheckKey(event.asset_key, event.check_name) in wanted_checks:
                        checks.append(AssetCheckResult(asset_key=event.asset_key, check_name=event.check_name, passed=event.passed, severity=event.severity, metadata=dict(event.metadata)))
                else:
                    yield event
            if not invocation.is_successful():
                failure = invocation.get_error()
                break

    # 2. the lineage pass over what was built; 3. outputs with its metadata, then the checks
    by_output = {translator.asset_key(s.uri).to_python_identifier(): s for s in steps}
    built = [by_output[name] for name in outputs if name in by_output]
    result = PassResult()
    if project.config.column_lineage and built:
        result = _lineage(context, project, built, plan, build_target)
    for name, out in outputs.items():
        step = by_output.get(name)
        extra = _metadata(step, result, translator) if step is not None else {}
        yield Output(value=None, output_name=name, metadata={**(out.metadata or {}), **extra})
    yield from checks
    if failure is not None:
        raise failure  # the run's target path stays for debugging
    shutil.rmtree(build_target, ignore_errors=True)  # compiled SQL of every model: not kept run after run


@contextlib.contextmanager
def _lake_env(values: dict[str, str]) -> Iterator[None]:
    """The configured main lake, for the generated profile's env_var() (dbt runs in a subprocess of this one)."""
    keys = ("LINEAGE_DUCKLAKE_CATALOG", "LINEAGE_DUCKLAKE_DATA_PATH")
    saved = {k: os.environ.get(k) for k in keys}
    try:
        for k in keys:
            if values.get(k):
                os.environ[k] = values[k]
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _target_path(project: DbtProject, project_dir: Path, context: Any) -> Path:
    """A target path of this run's own, seeded with the cached partial parse (no full re-parse per run)."""
    target = project_dir / "target" / f"lineage-{context.run.run_id[:8]}-{uuid.uuid4().hex[:8]}"
    target.mkdir(parents=True, exist_ok=True)
    cached = Path(project.manifest_path).parent / "partial_parse.msgpack"
    if cached.exists():
        shutil.copyfile(cached, target / "partial_parse.msgpack")
    return target


def _lineage(context: Any, project: DbtProject, built: Sequence[StepSpec], plan: Project, build_target: Path) -> PassResult:
    resource = context.resources.lineage
    settings = run_settings(resource)
    project_dir = Path(settings.pipelines_dir) / project.path
    engine = detect_engine(resource.dbt_analysis_executable or resource.dbt_executable)
    columns = {s.uri: s.output_columns for s in plan.steps if s.output_columns}
    prelude, own = own_catalogs(project)
    aliases = {**relation_aliases([s for s in plan.steps if s.dbt is not None]), **own}
    back = {v: k for k, v in aliases.items()}
    models = []
    for s in built:
        assert s.dbt is not None
        upstream: dict[str, Sequence[str]] = {}
        for d in s.deps:
            if d.uri in columns:
                upstream[back.get(d.uri, d.uri)] = columns[d.uri]  # the name the compiled SQL uses
        models.append(BuiltModel(s.dbt.unique_id, s.uri, s.path[len(project.path) + 1 :], upstream))
    select = " ".join(f"fqn:{s.dbt.fqn}" for s in built if s.dbt)

    def static_compile(target: Path, timeout: float) -> subprocess.CompletedProcess[str]:
        args = [engine.executable or _executable(resource), "compile", "--static-analysis", "strict", "--project-dir", str(project_dir),
                "--profiles-dir", project.profiles_dir, "--target-path", str(target), "--select", select, *project.config.cli_args()]  # fmt: skip
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=project_dir)

    record = context.instance.get_run_record_by_id(context.run.run_id)
    started = record.start_time if record is not None else None
    timeout = float(context.run.tags.get(MAX_RUNTIME_TAG) or resource.dbt_run_timeout)
    budget = pass_budget(timeout, started, time.time())
    cache = Path(settings.state_dir) / "cache" / "dbt-lineage" / f"{project.path.replace('/', '__')}.json"
    result = lineage_pass(
        models, engine=engine, build_target=build_target, project_name=project.name, node_uris=dict(project.node_uris),
        aliases=aliases, budget_seconds=budget, static_compile=static_compile, cache_file=cache, prelude=prelude,
    )  # fmt: skip
    if result.note:
        context.log.warning(f"dbt lineage pass ({project.path}): partial or no column lineage — {result.note}")
    else:
        context.log.info(f"dbt lineage pass ({project.path}): {len(models)} models from {result.source} in {result.seconds:.2f}s")
    return result


def _metadata(step: StepSpec, result: PassResult, translator: LineageTranslator) -> dict[str, Any]:
    """The same column schema and lineage entries a script's materialization carries."""
    uri = step.uri
    edges = result.edges.get(uri, ())
    meta: dict[str, Any] = {"lineage/uri": uri}
    if result.source:
        meta["lineage/column_lineage_source"] = result.source
    cols = result.columns.get(uri)
    if cols:
        schema = md.column_schema(uri, [c for c, _ in cols], edges, dict(cols))
        if schema is not None:
            meta["dagster/column_schema"] = schema
    lineage = md.column_lineage(uri, edges, translator.asset_key)
    if lineage is not None:
        meta["dagster/column_lineage"] = lineage
    table = md.lineage_markdown(uri, edges)
    if table is not None:
        meta["lineage/column_lineage"] = table
        meta["lineage/column_edges"] = md.edges_json(uri, edges)
    return meta
