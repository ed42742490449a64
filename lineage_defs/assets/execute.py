"""Run a script step from inside its Dagster op: partition windows in, materializations out.

SQL steps run in-process, a partition range in order, one transaction per
partition, each partition's materialization or failure reported on its own.
Python and Bash steps run as Dagster Pipes subprocesses (``run.launch``),
given their planned step through ``run.contract``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetMaterialization,
    MaterializeResult,
    MetadataValue,
    PipesSubprocessClient,
    PreviewWarning,
    TableSchema,
    TimeWindowPartitionsDefinition,
)

from lineage_defs.assets import metadata as md
from lineage_defs.assets.translator import LineageTranslator
from lineage_defs.errors import Location, RunError
from lineage_defs.events.store import BATCH_TAG
from lineage_defs.parse.model import Severity
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.run import cancel
from lineage_defs.run.context import PartitionWindow, resolve_token
from lineage_defs.run.contract import SliceReport, StepContext, script_env
from lineage_defs.run.events import RunBatch, load_batch, write_events_file
from lineage_defs.run.inputs import Missing, build_first, missing_after_process, not_there_yet
from lineage_defs.run.launch import interrupt_steps
from lineage_defs.run.declared import check_written, checks_declared
from lineage_defs.run.observe import observe
from lineage_defs.run.ranges import run_windows
from lineage_defs.run.script import checked_text, script_path
from lineage_defs.settings import LineageSettings


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


class _MetadataCache:
    """Per-step metadata values that repeat across a range run's partitions.

    The lineage entries never change within a run, and the schema and SQL
    text only when the slice changes them: building them once keeps a
    365-partition run from re-serialising the same objects 365 times.
    """

    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], Any] = {}

    def get(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in self.values:
            self.values[key] = make()
        return self.values[key]


def _schema_value(schema: tuple[tuple[str, str], ...], step: ScriptStep) -> TableSchema | None:
    return md.column_schema(step.uri, [n for n, _ in schema], step.column_edges, dict(schema))


def materialization_metadata(step: ScriptStep, translator: LineageTranslator, r: SliceReport, trigger: str, cache: _MetadataCache | None = None) -> dict[str, Any]:
    """Row count, schema, lineage, SQL run, snapshot, partition and trigger of one slice."""
    cache = cache or _MetadataCache()
    meta: dict[str, Any] = {"lineage/trigger": trigger, "lineage/target": r.target}
    if r.rows is not None:
        meta["dagster/row_count"] = int(r.rows)
    if r.partition is not None:
        meta["lineage/partition"] = r.partition
    if r.schema:
        schema = r.schema
        meta["dagster/column_schema"] = cache.get(("schema", schema), lambda: _schema_value(schema, step))
    lineage = cache.get(("lineage",), lambda: md.column_lineage(step.uri, step.column_edges, translator.asset_key))
    if lineage:
        meta["dagster/column_lineage"] = lineage
        meta["lineage/column_lineage"] = cache.get(("lineage_md",), lambda: md.lineage_markdown(step.uri, step.column_edges))
        meta["lineage/column_edges"] = cache.get(("edges",), lambda: md.edges_json(step.uri, step.column_edges))
    if r.sql:
        sql = r.sql
        meta["lineage/sql"] = cache.get(("sql", sql), lambda: MetadataValue.md("```sql\n" + ";\n\n".join(s.strip() for s in sql) + ";\n```"))
    if r.snapshot_id is not None:
        meta["lineage/ducklake_snapshot_id"] = int(r.snapshot_id)
    if r.schema_change:
        meta["lineage/schema_change"] = r.schema_change
    if r.batch:
        meta["lineage/batch"] = r.batch
    if r.skipped:
        meta["lineage/batch_already_written"] = True
    if r.seconds is not None:
        meta["lineage/seconds"] = round(float(r.seconds), 4)
    return meta


def _check_results(step: ScriptStep, key: Any, reports: list[SliceReport]) -> Iterator[AssetCheckResult]:
    """One result per check for the whole run (checks of a range aggregated)."""
    by_name: dict[str, list[tuple[str | None, Any]]] = {}
    for r in reports:
        for c in r.checks:
            by_name.setdefault(c.name, []).append((r.partition, c))
    for t in step.tests:
        outcomes = by_name.get(t.name)
        if not outcomes:
            continue
        failed = [(p, c) for p, c in outcomes if not c.passed]
        meta: dict[str, Any] = {"failing_rows": sum(int(c.failing) for _, c in failed), "description": outcomes[0][1].description}
        if failed:
            meta["samples"] = MetadataValue.json([s for _, c in failed for s in c.samples][:20])
            if any(p for p, _ in failed):
                meta["failed_partitions"] = MetadataValue.json([p for p, _ in failed])
        meta["sql"] = MetadataValue.md(f"```sql\n{outcomes[0][1].sql}\n```")
        yield AssetCheckResult(
            asset_key=key,
            check_name=t.name,
            passed=not failed,
            severity=AssetCheckSeverity.ERROR if t.severity == Severity.ERROR else AssetCheckSeverity.WARN,
            metadata=meta,
        )


def execute(context: Any, step: ScriptStep, translator: LineageTranslator) -> Iterator[Any]:
    settings: LineageSettings = context.resources.lineage.settings()
    with cancel.watching():  # a cancel stops the step even when Python loses Dagster's interrupt
        run = StepRun(context, step, translator, settings)
        if step.language.is_sql:
            yield from run.sql()
        else:
            yield from run.pipes()


class StepRun:
    """One run of one script step: its partitions, trigger, asset key and batch."""

    def __init__(self, context: Any, step: ScriptStep, translator: LineageTranslator, settings: LineageSettings) -> None:
        self.context, self.step, self.translator, self.settings = context, step, translator, settings
        self.wins = windows(context)
        self.trigger = trigger_of(context)
        self.key = translator.asset_key(step.uri)
        batch_id = batch_of(context)
        self.batch: RunBatch | None = load_batch(settings, step, batch_id) if batch_id else None
        if self.batch is not None:
            context.log.info(f"{step.path}: batch {self.batch.id} of {self.batch.stream}, {len(self.batch.events)} events")

    def _extra_outputs(self) -> Iterator[MaterializeResult]:
        for extra in self.step.outputs[1:]:
            yield MaterializeResult(asset_key=self.translator.asset_key(extra), metadata={"lineage/trigger": self.trigger})

    def sql(self) -> Iterator[Any]:
        context, step, key = self.context, self.step, self.key
        done: list[SliceReport] = []
        failed: list[tuple[str | None, BaseException]] = []
        cache = _MetadataCache()
        committed: list[tuple[str | None, dict[str, Any]]] = []
        try:
            for r in run_windows(self.settings, step, self.wins, self.batch):
                report = r.report(self.batch.id if self.batch else None)
                done.append(report)
                if r.error is not None:
                    if not failed or failed[-1][1] is not r.error:  # a set-based batch fails its partitions with one error: log it once
                        context.log.error(f"{step.path}{' partition ' + r.partition if r.partition else ''} failed: {r.error}")
                    failed.append((r.partition, r.error))
                    continue
                for w in report.warnings:
                    context.log.warning(f"{step.path}: {w}")
                meta = materialization_metadata(step, self.translator, report, self.trigger, cache)
                if len(self.wins) == 1:
                    yield MaterializeResult(asset_key=key, metadata=meta)
                    yield from self._extra_outputs()
                else:
                    committed.append((r.partition, meta))
        except BaseException as e:
            if isinstance(e, (Exception, GeneratorExit)):
                raise
            # cancelled in the middle of a range: the partitions committed before are in, and say so
            for partition, meta in committed:
                yield AssetMaterialization(asset_key=key, partition=partition, metadata=meta)
            yield from _check_results(step, key, done)  # their data tests (the interrupted partition has none)
            raise
        if committed and not failed:
            # The whole range is in: report it as the asset's output (downstream steps
            # of the same run need it), each partition with its own metadata.
            for partition, meta in committed:
                context.add_asset_metadata(meta, asset_key=key, partition_key=partition)
            yield MaterializeResult(asset_key=key)
            yield from self._extra_outputs()
        else:
            # Some partitions failed: the committed ones are reported one by one
            # and the step fails, so nothing downstream reads a partial range.
            for partition, meta in committed:
                yield AssetMaterialization(asset_key=key, partition=partition, metadata=meta)
        yield from _check_results(step, key, done)
        if failed:
            first = failed[0][1]
            names = ", ".join(p or "(unpartitioned)" for p, _ in failed[:10]) + (f" … ({len(failed)} in all)" if len(failed) > 10 else "")
            if self.wins == [None]:
                raise first
            others = "the others are materialized" if committed else "none was materialized"
            inputs = build_first([e for _, e in failed])
            fix = f"materialize {inputs} first, then re-run these partitions" if inputs else "fix the failing partitions and re-run them"
            raise RunError(
                f"{len(failed)} of {len(self.wins)} partitions failed: {names}; first error: {first}",
                Location(step.path),
                f"{fix}; {others}",
            ) from first

    def pipes(self) -> Iterator[Any]:
        context, step, settings = self.context, self.step, self.settings
        if len(self.wins) != 1:
            raise RunError("Python and Bash steps run one partition per run", Location(step.path), "launch the backfill with one run per partition")
        window = self.wins[0]
        checked_text(settings, step)  # the process runs the file the step was planned from
        script = script_path(settings, step)
        target = resolve_token(step.uri, window)
        with tempfile.TemporaryDirectory(prefix="lineage-step-") as tmp:
            result_file, error_file = Path(tmp) / "result.json", Path(tmp) / "error.json"
            events_file = None
            if self.batch is not None:
                events_file = Path(tmp) / "events.json"
                write_events_file(self.batch.events, events_file)
            upload = None
            output_path = None
            if target.startswith("s3://"):
                loc = settings.object_location(target)
                if loc.startswith("s3://"):
                    # the script writes a local file; it is uploaded in one PUT after success
                    upload = (Path(tmp) / "output" / Path(loc).name, loc)
                    upload[0].parent.mkdir()
                    output_path = str(upload[0])
                else:
                    Path(loc).parent.mkdir(parents=True, exist_ok=True)
                    output_path = loc
            step_context = StepContext(
                step=step, script=str(script), result_file=str(result_file), error_file=str(error_file),
                partition=window.key if window else None,
                partition_start=window.start.isoformat() if window and window.start else None,
                partition_end=window.end.isoformat() if window and window.end else None,
                events_file=str(events_file) if events_file else None, batch=self.batch.id if self.batch else None, output_path=output_path,
            )  # fmt: skip
            context_file = Path(tmp) / "context.json"
            step_context.save(context_file)
            env = {**settings.to_env(), **script_env(step_context, context_file, sys.executable), "PYTHONUNBUFFERED": "1"}
            command = [sys.executable, "-m", "lineage_defs.run.launch"]
            try:
                cancel.raise_if_cancelled()
                with warnings.catch_warnings(), cancel.on_cancel(interrupt_steps):
                    # Dagster's own PipesMessageHandler reads this preview property of every
                    # reader, ours included, on every run: nothing a user can act on.
                    warnings.filterwarnings("ignore", message=r".*PipesMessageReader\.expected_writer_count", category=PreviewWarning)
                    invocation = PipesSubprocessClient(cwd=str(script.parent)).run(command=command, context=context, env=env)
            except Exception as e:
                stop = cancel.interruption_of(e)
                if stop is not None:  # the process stopped on the cancel's SIGINT (our handler sent it)
                    raise stop from e
                # a blocking data test rolled the write back: still report the checks
                if result_file.exists():
                    yield from _check_results(step, self.key, [SliceReport.from_json(result_file.read_text())])
                if error_file.exists():
                    raise self._failure(json.loads(error_file.read_text()), window) from e
                raise
            reported = list(invocation.get_results())
            written = SliceReport.from_json(result_file.read_text()) if result_file.exists() else None
            if upload and upload[0].exists():
                _upload(settings, upload[0], upload[1])
        user_meta: dict[str, Any] = {}
        for r in reported:
            if isinstance(r, MaterializeResult):
                user_meta.update(r.metadata or {})
            else:
                yield r
        result = written or observe(settings, target, window)
        if result.observe_error:
            context.log.warning(f"{step.path}: no row count or schema for {target}: {result.observe_error}")
        elif written is None and result.schema is not None and checks_declared(step):  # a manual step's own write
            check_written(step, target, [name for name, _ in result.schema])
        result = dataclasses.replace(result, batch=self.batch.id if self.batch else None)
        user_meta.update(result.reported)
        meta = {**materialization_metadata(step, self.translator, result, self.trigger), **user_meta}
        yield from _check_results(step, self.key, [result])
        yield MaterializeResult(asset_key=self.key, metadata=meta)

    def _failure(self, err: dict[str, Any], window: PartitionWindow | None) -> RunError:
        """The script's own error (its ``file:line``), or — when an input it reads is not built —
        which input and partition to build first, as a SQL step says it."""
        step = self.step
        where = Location(step.path, int(err["line"]), 1 if err["line"] else 0, err["text"].strip(), len(err["text"].strip()) or 1)
        missing = [Missing(**m) for m in err.get("missing") or ()] or missing_after_process(self.settings, step, window)
        if missing:
            said = str(err["message"]).splitlines()[0]
            return not_there_yet(missing, where, window, f"the step said: {said}")
        return RunError(f"the step failed: {err['message']}\n{err['traceback']}", where, "fix the script and re-run it (managed writes are idempotent)")


def _upload(settings: LineageSettings, local: Path, url: str) -> None:
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
