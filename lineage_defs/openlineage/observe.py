"""Around a step's op body: START for each step it runs, COMPLETE (or FAIL / ABORT) with what it wrote.

One OpenLineage run per step (a script, or each selected dbt model), its
parent the Dagster run. The output datasets carry the written relation's
schema (the materialization's ``dagster/column_schema``, or the plan's
columns) and its column lineage: a script's from the plan (with the clause
of each scan), a dbt model's from the lineage pass when it ran. Building and
sending events never fails the step: a problem is a warning in its log.

A run whose endpoint cannot be reached or does not answer within the budget
gives up on it (``emitter``): one warning, in the step that gave up, and the
run tag ``lineage/openlineage_gave_up`` so that its later steps — in this
process or another (Dagster's multiprocess executor) — send nothing and do
not wait.
"""

from __future__ import annotations

import datetime as dt
import traceback
import uuid
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any

from dagster import AssetKey, AssetMaterialization, MaterializeResult, Output

from lineage_defs.openlineage.config import configured
from lineage_defs.openlineage.emitter import Emitter, Outcome, given_up
from lineage_defs.openlineage.spec import Dataset, Event, RunInfo, output_dataset
from lineage_defs.plan.spec import AnyStep, ColumnEdge, EdgeKind, ScriptStep


GAVE_UP_TAG = "lineage/openlineage_gave_up"  # on a run whose steps stopped sending: why


class JobType(StrEnum):
    SCRIPT = "SCRIPT"  # one run per op: the step fails as a whole
    DBT_MODEL = "DBT_MODEL"  # one run per model: a model built before a failure is complete


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat()


def observed(context: Any, steps: Mapping[AssetKey, AnyStep], events: Iterator[Any], job_type: JobType) -> Iterator[Any]:
    """``events`` passed through; OpenLineage events emitted around them when the client is configured."""
    if not configured():
        yield from events
        return
    watch = _Watch(context, steps, job_type)
    try:
        for event in events:
            watch.saw(event)
            yield event
    except GeneratorExit:  # the op was stopped (run terminated)
        watch.finish("ABORT")
        raise
    except BaseException as e:
        watch.finish("FAIL", e)
        raise
    else:
        watch.finish("COMPLETE")


class _Watch:
    def __init__(self, context: Any, steps: Mapping[AssetKey, AnyStep], job_type: JobType) -> None:
        self.context, self.job_type = context, job_type
        self.written: dict[AssetKey, dict[str, Any]] = {}
        self.emitter: Emitter | None = None
        self.run_id: str | None = None
        try:
            settings = context.resources.lineage.settings()
            selected = set(context.selected_asset_keys)
            self.steps = {k: s for k, s in steps.items() if k in selected} or dict(steps)
            self.by_output = {k.to_python_identifier(): k for k in self.steps}
            self.runs = {k: self._run(s) for k, s in self.steps.items()}
            self.budget = settings.openlineage_timeout
            self.run_id = context.run.run_id
            reason = given_up(self.run_id) or context.run.tags.get(GAVE_UP_TAG)
            if reason:
                context.log.debug(f"OpenLineage: no events for this step: this run gave up on the endpoint earlier ({reason})")
                return
            self.emitter = Emitter(settings.openlineage_namespace, self.budget, self.run_id)
            for k, s in self.steps.items():
                self.emitter.emit(Event("START", _now(), self.runs[k], _inputs(s), tuple(Dataset(u) for u in s.outputs)))
        except Exception as e:
            self._warn(f"OpenLineage: no events for this step: {type(e).__name__}: {e}")

    def _run(self, s: AnyStep) -> RunInfo:
        ctx = self.context
        start = end = None
        if ctx.has_partition_key or ctx.has_partition_key_range:
            try:
                window = ctx.partition_time_window
                start, end = window.start.isoformat(), window.end.isoformat()
            except Exception:  # not time partitions
                pass
        sql = ";\n".join(st.sql for st in s.statements) if isinstance(s, ScriptStep) and s.language.is_sql and s.statements else None
        return RunInfo(
            run_id=str(uuid.uuid4()), job=s.path, job_type=self.job_type.value, parent_run_id=ctx.run.run_id, parent_job=ctx.job_name,
            sql=sql, dialect=s.language.value if sql else None, nominal_start=start, nominal_end=end,
        )  # fmt: skip

    def saw(self, event: Any) -> None:
        """Note what a materialization says of its asset (the last one of a range wins)."""
        if self.emitter is None:
            return
        if isinstance(event, (MaterializeResult, AssetMaterialization)):
            key = event.asset_key
        elif isinstance(event, Output):
            key = self.by_output.get(event.output_name)
        else:
            return
        if key in self.steps:
            self.written.setdefault(key, {}).update(event.metadata or {})

    def finish(self, state: str, error: BaseException | None = None) -> None:
        if self.emitter is None:
            return
        try:
            for k, s in self.steps.items():
                done = state if error is None or self.job_type is JobType.SCRIPT or k not in self.written else "COMPLETE"
                outputs = tuple(self._output(s, u, self.written.get(k, {})) for u in s.outputs) if done == "COMPLETE" else tuple(Dataset(u) for u in s.outputs)
                message = stack = None
                if done != "COMPLETE" and error is not None:
                    message = f"{type(error).__name__}: {error}"[:4000]
                    stack = "".join(traceback.format_exception(error))[-8000:]
                self.emitter.emit(Event(done, _now(), self.runs[k], _inputs(s), outputs, message, stack))
        except Exception as e:
            self._warn(f"OpenLineage: no {state} event: {type(e).__name__}: {e}")
        self._report(self.emitter.close())

    def _output(self, s: AnyStep, uri: str, meta: Mapping[str, Any]) -> Dataset:
        if uri != s.uri:
            return Dataset(uri)
        columns: list[tuple[str, str | None]] = []
        schema = meta.get("dagster/column_schema")
        schema = getattr(schema, "schema", schema)  # a TableSchemaMetadataValue, or the TableSchema itself
        if schema is not None and getattr(schema, "columns", None):
            columns = [(c.name, c.type if c.type != "unknown" else None) for c in schema.columns]
        elif s.output_columns:
            columns = [(c, None) for c in s.output_columns]
        edges = s.column_edges
        if not isinstance(s, ScriptStep):  # a dbt model: the lineage pass's edges of what was built
            edges = _edges(meta.get("lineage/column_edges")) or edges
        return output_dataset(uri, columns, edges)

    def _report(self, outcome: Outcome) -> None:
        lost = len(outcome.failed) + outcome.pending
        total = outcome.sent + lost
        if not lost:
            self.context.log.debug(f"OpenLineage: {outcome.sent} events sent (waited {outcome.waited:.3f} s at the end)")
            return
        if outcome.gave_up is None:
            first = outcome.failed[0] if outcome.failed else "this run gave up on the endpoint"
            self._warn(f"OpenLineage: {lost} of {total} events not sent ({first}); the step waited {outcome.waited:.2f} s for them")
            return
        self._warn(
            f"OpenLineage: {lost} of {total} events not sent ({outcome.gave_up}); the step waited {outcome.waited:.2f} s for them; "
            "this run's later steps send none (the next run tries the endpoint again)"
        )
        try:  # steps of this run in other processes read it from the run's tags
            assert self.run_id is not None
            self.context.instance.add_run_tags(self.run_id, {GAVE_UP_TAG: outcome.gave_up[:500]})
        except Exception as e:
            self.context.log.debug(f"OpenLineage: could not tag the run: {type(e).__name__}: {e}")

    def _warn(self, message: str) -> None:
        try:
            self.context.log.warning(message)
        except Exception:
            pass


def _inputs(s: AnyStep) -> tuple[Dataset, ...]:
    return tuple(Dataset(d.uri) for d in s.deps)


def _edges(value: Any) -> tuple[ColumnEdge, ...]:
    data = getattr(value, "data", value)
    if not isinstance(data, list):
        return ()
    return tuple(ColumnEdge(str(d["from"]), str(d["to"]), EdgeKind(d["kind"])) for d in data if isinstance(d, dict) and {"from", "to", "kind"} <= set(d))
