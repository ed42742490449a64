"""Run a step from inside its Dagster op: partition windows in, materializations out.

SQL steps run in-process, a partition range in order, one transaction per
partition, each partition's materialization or failure reported on its own.
Python and Bash steps run as Dagster Pipes subprocesses.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetMaterialization,
    MaterializeResult,
    MetadataValue,
    PipesSubprocessClient,
    TableSchema,
    TimeWindowPartitionsDefinition,
)

from lineage_defs.assets import metadata as md
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.errors import Location, RunError
from lineage_defs.plan.spec import Project, StepSpec
from lineage_defs.run.context import PartitionWindow, partition_env, resolve_token
from lineage_defs.run.events import BATCH_TAG, RunBatch, load_batch, write_events_file
from lineage_defs.run.observe import observe
from lineage_defs.run.sql_step import slice_dict
from lineage_defs.run.substrates import RunSettings


def run_settings(resource: Any) -> RunSettings:
    """The run layer's settings from the Dagster resource (same field names)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(RunSettings):
        if hasattr(resource, f.name):
            v = getattr(resource, f.name)
            values[f.name] = dict(v) if isinstance(v, Mapping) else v
    values["state_dir"] = os.path.abspath(resource.state_dir)
    values["pipelines_dir"] = os.path.abspath(resource.pipelines_dir)
    return RunSettings(**values)


def windows(context: Any) -> list[PartitionWindow | None]:
    """The partitions this run covers, in order (None for an unpartitioned asset)."""
    if not context.has_partition_key and not context.has_partition_key_range:
        return [None]
    pdef = context.assets_def.partitions_def
    keys = list(context.partition_keys)
    if isinstance(pdef, TimeWindowPartitionsDefinition):
        out: list[PartitionWindow | None] = []
        for k in keys:
            tw = pdef.time_window_for_partition_key(k)
            out.append(PartitionWindow(k, tw.start, tw.end))
        return out
    return [PartitionWindow(k) for k in keys]


def batch_of(context: Any) -> str | None:
    """The run's trigger batch: its own ``lineage/batch`` tag, else its parent's (a re-execution that dropped the tag)."""
    run, hops = context.run, 0
    while run is not None and hops < 50:
        batch = run.tags.get(BATCH_TAG)
        if batch:
            return str(batch)
        run = context.instance.get_run_by_id(run.parent_run_id) if run.parent_run_id else None
        hops += 1
    return None


def trigger_of(context: Any) -> str:
    tags = context.run.tags
    for tag, label in (("dagster/sensor_name", "sensor"), ("dagster/schedule_name", "schedule"), ("dagster/backfill", "backfill")):
        if tags.get(tag):
            return f"{label}:{tags[tag]}"
    if tags.get("dagster/auto_materialize") or tags.get("dagster/from_automation_condition"):
        return "automation"
    return "manual"


def _schema_value(schema: list[tuple[str, str]], step: StepSpec) -> TableSchema | None:
    return md.column_schema(step.uri, [n for n, _ in schema], step.column_edges, dict(schema))


class _MetadataCache:
    """Per-step metadata values that repeat across a range run's partitions.

    The lineage entries never change within a run, and the schema and SQL
    text only when the slice changes them: building them once keeps a
    365-partition run from re-serialising the same objects 365 times.
    """

    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], Any] = {}

    def get(self, key: tuple[Any, ...], make: Any) -> Any:
        if key not in self.values:
            self.values[key] = make()
        return self.values[key]


def materialization_metadata(
    step: StepSpec, translator: LineageTranslator, result: dict[str, Any], trigger: str, cache: _MetadataCache | None = None
) -> dict[str, Any]:
    """Row count, schema, lineage, SQL run, snapshot, partition and trigger of one slice."""
    cache = cache or _MetadataCache()
    meta: dict[str, Any] = {"lineage/trigger": trigger, "lineage/target": result["target"]}
    if result.get("rows") is not None:
        meta["dagster/row_count"] = int(result["rows"])
    if result.get("partition") is not None:
        meta["lineage/partition"] = result["partition"]
    if result.get("schema"):
        schema = tuple(tuple(c) for c in result["schema"])
        meta["dagster/column_schema"] = cache.get(("schema", schema), lambda: _schema_value(list(schema), step))
    lineage = cache.get(("lineage",), lambda: md.column_lineage(step.uri, step.column_edges, translator.asset_key))
    if lineage:
        meta["dagster/column_lineage"] = lineage
        meta["lineage/column_lineage"] = cache.get(("lineage_md",), lambda: md.lineage_markdown(step.uri, step.column_edges))
        meta["lineage/column_edges"] = cache.get(("edges",), lambda: md.edges_json(step.uri, step.column_edges))
    if result.get("sql"):
        sql = tuple(result["sql"])
        meta["lineage/sql"] = cache.get(("sql", sql), lambda: MetadataValue.md("```sql\n" + ";\n\n".join(s.strip() for s in sql) + ";\n```"))
    if result.get("snapshot_id") is not None:
        meta["lineage/ducklake_snapshot_id"] = int(result["snapshot_id"])
    if result.get("schema_change"):
        meta["lineage/schema_change"] = result["schema_change"]
    if result.get("batch"):
        meta["lineage/batch"] = result["batch"]
    if result.get("skipped"):
        meta["lineage/batch_already_written"] = True
    if result.get("seconds") is not None:
        meta["lineage/seconds"] = round(float(result["seconds"]), 4)
    return meta


def _check_results(step: StepSpec, key: Any, per_partition: list[dict[str, Any]]) -> Iterator[AssetCheckResult]:
    """One result per check for the whole run (checks of a range aggregated)."""
    by_name: dict[str, list[tuple[str | None, dict[str, Any]]]] = {}
    for r in per_partition:
        for c in r.get("checks", []):
            by_name.setdefault(c["name"], []).append((r.get("partition"), c))
    for t in step.tests:
        outcomes = by_name.get(t.name)
        if not outcomes:
            continue
        failed = [(p, c) for p, c in outcomes if not c["passed"]]
        meta: dict[str, Any] = {"failing_rows": sum(int(c["failing"]) for _, c in failed), "description": outcomes[0][1]["description"]}
        if failed:
            meta["samples"] = MetadataValue.json([s for _, c in failed for s in c["samples"]][:20])
            if any(p for p, _ in failed):
                meta["failed_partitions"] = MetadataValue.json([p for p, _ in failed])
        meta["sql"] = MetadataValue.md(f"```sql\n{outcomes[0][1]['sql']}\n```")
        yield AssetCheckResult(
            asset_key=key,
            check_name=t.name,
            passed=not failed,
            severity=AssetCheckSeverity.ERROR if t.severity == "error" else AssetCheckSeverity.WARN,
            metadata=meta,
        )


def execute(context: Any, step: StepSpec, project: Project, translator: LineageTranslator) -> Iterator[Any]:
    settings = run_settings(context.resources.lineage)
    wins = windows(context)
    trigger = trigger_of(context)
    key = translator.asset_key(step.uri)
    batch_id = batch_of(context)
    batch = load_batch(settings.state_dir, step, batch_id) if batch_id else None
    if batch is not None:
        context.log.info(f"{step.path}: batch {batch.id} of {batch.stream}, {len(batch.events)} events")
    if step.language in ("duckdb", "postgres"):
        yield from _execute_sql(context, step, settings, wins, trigger, key, translator, batch)
    else:
        yield from _execute_pipes(context, step, settings, wins, trigger, key, translator, batch)


def _execute_sql(context: Any, step: StepSpec, settings: RunSettings, wins: list[PartitionWindow | None], trigger: str, key: Any, translator: LineageTranslator, batch: RunBatch | None = None) -> Iterator[Any]:
    from lineage_defs.run.sql_step import run_windows

    done: list[dict[str, Any]] = []
    failed: list[tuple[str | None, BaseException]] = []
    cache = _MetadataCache()
    committed: list[tuple[str | None, dict[str, Any]]] = []
    for r in run_windows(settings, step, wins, batch):
        d = slice_dict(r)
        d["batch"] = batch.id if batch else None
        done.append(d)
        if r.error is not None:
            if not failed or failed[-1][1] is not r.error:  # a set-based batch fails its partitions with one error: log it once
                context.log.error(f"{step.path}{' partition ' + r.partition if r.partition else ''} failed: {r.error}")
            failed.append((r.partition, r.error))
            continue
        for w in d["warnings"]:
            context.log.warning(f"{step.path}: {w}")
        meta = materialization_metadata(step, translator, d, trigger, cache)
        if len(wins) == 1:
            yield MaterializeResult(asset_key=key, metadata=meta)
            for extra in step.outputs[1:]:
                yield MaterializeResult(asset_key=translator.asset_key(extra), metadata={"lineage/trigger": trigger})
        else:
            committed.append((r.partition, meta))
    if committed and not failed:
        # The whole range is in: report it as the asset's output (downstream steps
        # of the same run need it), each partition with its own metadata.
        for partition, meta in committed:
            context.add_asset_metadata(meta, asset_key=key, partition_key=partition)
        yield MaterializeResult(asset_key=key)
        for extra in step.outputs[1:]:
            yield MaterializeResult(asset_key=translator.asset_key(extra), metadata={"lineage/trigger": trigger})
    else:
        # Some partitions failed: the committed ones are reported one by one
        # and the step fails, so nothing downstream reads a partial range.
        for partition, meta in committed:
            yield AssetMaterialization(asset_key=key, partition=partition, metadata=meta)
    yield from _check_results(step, key, done)
    if failed:
        first = failed[0][1]
        names = ", ".join(p or "(unpartitioned)" for p, _ in failed[:10]) + (f" … ({len(failed)} in all)" if len(failed) > 10 else "")
        if wins == [None]:
            raise first
        others = "the others are materialized" if committed else "none was materialized"
        raise RunError(
            f"{len(failed)} of {len(wins)} partitions failed: {names}; first error: {first}",
            Location(step.path),
            f"fix the failing partitions and re-run them; {others}",
        ) from first


def _execute_pipes(context: Any, step: StepSpec, settings: RunSettings, wins: list[PartitionWindow | None], trigger: str, key: Any, translator: LineageTranslator, batch: RunBatch | None = None) -> Iterator[Any]:
    if len(wins) != 1:
        raise RunError("Python and Bash steps run one partition per run", Location(step.path), "launch the backfill with one run per partition")
    window = wins[0]
    script = Path(settings.pipelines_dir) / step.path
    target = resolve_token(step.uri, window)
    with tempfile.TemporaryDirectory(prefix="lineage-step-") as tmp:
        result_file = Path(tmp) / "result.json"
        env = {
            **settings.to_env(),
            **partition_env(window),
            "LINEAGE_STEP_PATH": step.path,
            "LINEAGE_TARGET": target,
            "LINEAGE_RESULT_FILE": str(result_file),
            "PYTHONUNBUFFERED": "1",
        }
        if batch is not None:
            events_file = Path(tmp) / "events.json"
            write_events_file(batch.events, events_file)
            env.update(LINEAGE_EVENTS_FILE=str(events_file), LINEAGE_BATCH=batch.id)
        upload = None
        if target.startswith("s3://"):
            loc = settings.object_location(target)
            if loc.startswith("s3://"):
                # the script writes a local file; it is uploaded in one PUT after success
                upload = (Path(tmp) / "output" / Path(loc).name, loc)
                upload[0].parent.mkdir()
                env["LINEAGE_OUTPUT_PATH"] = str(upload[0])
            else:
                Path(loc).parent.mkdir(parents=True, exist_ok=True)
                env["LINEAGE_OUTPUT_PATH"] = loc
        env["LINEAGE_PYTHON"] = sys.executable
        command = [sys.executable, "-m", "lineage_defs.run.launch", step.language, str(script)]
        error_file = Path(tmp) / "error.json"
        env["LINEAGE_ERROR_FILE"] = str(error_file)
        env["LINEAGE_SCRIPT"] = str(script)
        try:
            invocation = PipesSubprocessClient(cwd=str(script.parent)).run(command=command, context=context, env=env)
        except Exception as e:
            # a blocking data test rolled the write back: still report the checks
            if result_file.exists():
                yield from _check_results(step, key, [json.loads(result_file.read_text())])
            if error_file.exists():
                err = json.loads(error_file.read_text())
                where = Location(step.path, int(err["line"]), 1 if err["line"] else 0, err["text"].strip(), len(err["text"].strip()) or 1)
                raise RunError(f"the step failed: {err['message']}\n{err['traceback']}", where, "fix the script and re-run it (managed writes are idempotent)") from e
            raise
        reported = [r for r in invocation.get_results()]
        written = json.loads(result_file.read_text()) if result_file.exists() else None
        if upload and upload[0].exists():
            _upload(settings, upload[0], upload[1])
    user_meta: dict[str, Any] = {}
    for r in reported:
        if isinstance(r, MaterializeResult):
            user_meta.update(r.metadata or {})
        else:
            yield r
    result = written or observe(settings, target, window)
    if result.get("observe_error"):
        context.log.warning(f"{step.path}: no row count or schema for {target}: {result['observe_error']}")
    result["batch"] = batch.id if batch else None
    user_meta.update((written or {}).get("reported") or {})
    meta = {**materialization_metadata(step, translator, result, trigger), **user_meta}
    yield from _check_results(step, key, [result])
    yield MaterializeResult(asset_key=key, metadata=meta)


def _upload(settings: RunSettings, local: Path, url: str) -> None:
    import boto3

    bucket, _, key = url[len("s3://"):].partition("/")
    client = boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=settings.s3_secret_access_key,
    )
    client.upload_file(str(local), bucket, key)
