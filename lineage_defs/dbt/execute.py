"""Run a dbt project's multi-asset: dbt through dagster-dbt, then the lineage pass.

Imported only when a dbt asset runs (dagster-dbt and dbt cost seconds to
import). dagster-dbt's event stream reports each built model and each test,
mapped to the plan's keys by ``LineageDbtTranslator``; the models' outputs
are held until the lineage pass has run, so each carries its column schema
(real types from one catalog query, ``catalog.py``) and column lineage (read
back like a script's), and are yielded upstream first. A source that is one
of the project's own seeds or models is an edge dbt cannot see: the build
then runs in waves (``selection.waves``). The embedded DuckDB files admit one
writing process: a project on the default profile holds the state lock while
dbt runs, and releases it before the catalog query takes it again.
"""

from __future__ import annotations

import contextlib
import functools
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Any

from dagster import AssetCheckEvaluation, AssetCheckKey, AssetCheckResult, AssetMaterialization, Output
from dagster_dbt import DbtCliResource
from packaging.version import Version

from lineage_defs.assets import metadata as md
from lineage_defs.assets.context import BuildContext
from lineage_defs.dbt.catalog import Columns, build_columns, relations_to_read
from lineage_defs.dbt.commands import MAX_RUNTIME_TAG, dbt_commands, pass_budget
from lineage_defs.dbt.lineage_pass import BuiltModel, LineagePass, PassResult, detect_engine
from lineage_defs.dbt.project import DbtProject
from lineage_defs.dbt.relations import analysis_uri, node_relation
from lineage_defs.dbt.selection import by_name, dbt_parents, topological, wave_args, waves
from lineage_defs.dbt.translator import LineageDbtTranslator
from lineage_defs.errors import RunError
from lineage_defs.plan.spec import DbtStep
from lineage_defs.run.substrates import StateLock


def bundled_dbt() -> Path:
    """The dbt executable of this interpreter's dbt-core (the default ``dbt_executable``)."""
    return Path(sys.executable).parent / "dbt"


@functools.lru_cache(maxsize=8)
def cli_version(executable: str) -> Version:
    """The version ``executable --version`` reports: read from the installed dbt-core for the bundled
    one (``dbt --version`` imports all of dbt: ~3 s of every dbt step), asked once per process otherwise."""
    if Path(executable) == bundled_dbt():
        return Version(package_version("dbt-core"))
    fix = "set the settings' dbt_executable to a dbt that prints its version (or leave it unset for this environment's dbt-core)"
    try:
        out = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise RunError(f"`{executable} --version` failed: {e}", fix=fix) from None
    m = re.search(r"(\d+\.\d+\.\d+)", out)
    if not m:
        raise RunError(f"could not read a version from `{executable} --version`: {out.strip()[:200]!r}", fix=fix)
    return Version(m.group(1))


class DbtCli(DbtCliResource):
    """dagster-dbt's resource, told the dbt version it would otherwise ask ``dbt --version`` for once per resource (``cli_version``)."""

    @functools.cached_property
    def _cli_version(self) -> Version:
        return cli_version(self.dbt_executable)


class DbtRun:
    """One run of one dbt multi-asset (a project's models, or one microbatch model)."""

    def __init__(self, context: Any, project: DbtProject, steps: Sequence[DbtStep], ctx: BuildContext) -> None:
        self.context = context
        self.project = project
        self.steps = steps
        self.ctx = ctx
        self.settings = context.resources.lineage.settings()
        self.project_dir = project.project_dir(self.settings.pipelines_dir)
        self.keys = ctx.keys

    def _executable(self) -> str:
        return self.settings.dbt_executable or str(bundled_dbt())

    def _window(self) -> tuple[Any, Any] | None:
        context = self.context
        if any(s.partitioning is not None for s in self.steps) and (context.has_partition_key or context.has_partition_key_range):
            tw = context.partition_time_window
            return (tw.start, tw.end)
        return None

    def execute(self, selection: list[str]) -> Iterator[Any]:
        context, project, keys = self.context, self.project, self.keys
        dbt = DbtCli(project_dir=str(self.project_dir), profiles_dir=project.profiles_dir, dbt_executable=self._executable())
        aliases = dict(project.lineage_aliases)  # a source whose relation is a model's or seed's reports as that asset
        node_keys = {u: keys.asset_key(aliases.get(uri, uri)) for u, uri in project.node_uris}
        node_keys.update({s.unique_id: keys.asset_key(s.uri) for s in self.steps})
        translator = LineageDbtTranslator(node_keys)
        manifest = project.manifest()
        by_key = {keys.asset_key(s.uri): s for s in self.steps}
        wanted_checks = set(context.selected_asset_check_keys)
        chosen = [by_key[k] for k in context.selected_asset_keys if k in by_key]
        tests = [t for s in self.steps for t in s.tests if AssetCheckKey(keys.asset_key(t.asset) if t.asset else keys.asset_key(s.uri), t.name) in wanted_checks]
        if set(context.selected_asset_keys) != set(by_key):  # a subset: the selected models by name, and selected source tests
            selection = by_name(chosen, [t for t in tests if t.select])
        # dbt orders by ref() and source(); a source that is one of these models is an edge it
        # cannot see: then the build runs in waves, the model after the one its source is
        picked = {s.uri for s in chosen}
        steps_of_run = [s for s in self.steps if s.uri in picked]
        parts = waves(steps_of_run, tests, manifest["nodes"])
        selections = [wave_args(models, wave_tests, manifest["nodes"]) for models, wave_tests in parts] if len(parts) > 1 else [selection]

        # 1. dbt, holding the state lock on the embedded default
        outputs: dict[str, Output[Any]] = {}
        checks: list[AssetCheckResult] = []
        failure: BaseException | None = None
        lock = StateLock(self.settings) if project.default_profile else contextlib.nullcontext()
        build_target = project.target_path(self.settings.pipelines_dir, context.run.run_id)
        with lock:
            for args in [a for sel in selections for a in dbt_commands(project.config, self._window(), sel)]:
                context.log.info(f"dbt {' '.join(args)}")
                invocation = dbt.cli(args, manifest=manifest, dagster_dbt_translator=translator, raise_on_error=False, target_path=build_target)
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

        # 2. the real columns of what was built, and the lineage pass over it
        by_output = {keys.asset_key(s.uri).to_python_identifier(): s for s in self.steps}
        built = topological([by_output[name] for name in outputs if name in by_output])  # outputs in dependency order
        columns, result = self._columns(built, manifest), PassResult()
        if project.config.column_lineage and built:
            result = self._lineage(built, build_target, columns, manifest)
        # 3. outputs with their metadata, upstreams first; then the checks
        for step in built:
            name = keys.asset_key(step.uri).to_python_identifier()
            out = outputs[name]
            yield Output(value=None, output_name=name, metadata={**(out.metadata or {}), **self._metadata(step, result, columns)})
        yield from checks
        if failure is not None:
            raise failure  # the run's target path stays for debugging
        project.keep_partial_parse(build_target)
        shutil.rmtree(build_target, ignore_errors=True)  # compiled SQL of every model: not kept run after run

    def _columns(self, built: Sequence[DbtStep], manifest: dict[str, Any]) -> Columns:
        """One catalog query: the built relations and every relation the built models read."""
        if not built:
            return {}
        relations, known = relations_to_read(built, manifest, self.project, {s.uri for s in self.ctx.project.steps}, self.settings, self.context.instance)
        start = time.perf_counter()
        columns, note = build_columns(self.project, self.settings, sorted(relations), known)
        if note:
            self.context.log.warning(f"dbt column types ({self.project.path}): {note}")
        else:
            self.context.log.debug(f"dbt column types ({self.project.path}): {len(relations)} relations in {time.perf_counter() - start:.3f}s")
        return columns

    def _lineage(self, built: Sequence[DbtStep], build_target: Path, real: Columns, manifest: dict[str, Any]) -> PassResult:
        context, project, settings = self.context, self.project, self.settings
        engine = detect_engine(settings.dbt_analysis_executable or settings.dbt_executable)
        planned = {s.uri: s.output_columns for s in self.ctx.project.steps if s.output_columns}
        aliases = dict(project.lineage_aliases)
        back = {v: k for k, v in aliases.items()}
        nodes, sources = manifest["nodes"], manifest["sources"]
        node_uris = dict(project.node_uris)
        models = []
        for s in built:
            if s.resource_type != "model":
                continue  # a seed or snapshot has no compiled SQL: its columns come from the catalog
            upstream: dict[str, list[str]] = {}
            for u in dbt_parents(s.unique_id, nodes):
                node = nodes.get(u) or sources.get(u)
                if node is None:
                    continue
                relation = node_relation(node)
                name = analysis_uri(relation, project.default_profile)  # the name the compiled SQL uses
                cols = [c for c, _ in real.get(relation.lower(), ())] or list(planned.get(node_uris.get(u, ""), None) or ())
                if name and cols:
                    upstream[back.get(name, name)] = cols
            models.append(BuiltModel(s.unique_id, s.uri, s.path[len(project.path) + 1 :], upstream))
        if not models:
            return PassResult()
        select = " ".join(f"fqn:{s.fqn}" for s in built if s.resource_type == "model")

        def static_compile(target: Path, timeout: float) -> subprocess.CompletedProcess[str]:
            args = [engine.executable or self._executable(), "compile", "--static-analysis", "strict", "--project-dir", str(self.project_dir),
                    "--profiles-dir", project.profiles_dir, "--target-path", str(target), "--select", select, *project.cli_args()]  # fmt: skip
            return subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=self.project_dir)

        record = context.instance.get_run_record_by_id(context.run.run_id)
        started = record.start_time if record is not None else None
        timeout = float(context.run.tags.get(MAX_RUNTIME_TAG) or settings.dbt_run_timeout)
        lineage = LineagePass(
            engine=engine, build_target=build_target, project_name=project.name, node_uris=node_uris, aliases=aliases,
            prelude=project.lineage_prelude, static_compile=static_compile, cache_file=project.lineage_cache(settings),
        )  # fmt: skip
        result = lineage.run(models, pass_budget(timeout, started, time.time()))
        if result.note:
            context.log.warning(f"dbt lineage pass ({project.path}): partial or no column lineage — {result.note}")
        else:
            context.log.info(f"dbt lineage pass ({project.path}): {len(models)} models from {result.source} in {result.seconds:.2f}s")
        return result

    def _metadata(self, step: DbtStep, result: PassResult, real: Columns) -> dict[str, Any]:
        """The same column schema and lineage entries a script's materialization carries."""
        uri = step.uri
        edges = result.edges.get(uri, ())
        meta: dict[str, Any] = {"lineage/uri": uri}
        if result.source:
            meta["lineage/column_lineage_source"] = result.source
        cols = real.get(step.relation.lower()) or result.columns.get(uri)  # the catalog's, else what the analysis saw
        if cols:
            schema = md.column_schema(uri, [c for c, _ in cols], edges, dict(cols))
            if schema is not None:
                meta["dagster/column_schema"] = schema
        lineage = md.column_lineage(uri, edges, self.keys.asset_key)
        if lineage is not None:
            meta["dagster/column_lineage"] = lineage
        table = md.lineage_markdown(uri, edges)
        if table is not None:
            meta["lineage/column_lineage"] = table
            meta["lineage/column_edges"] = md.edges_json(uri, edges)
        return meta
