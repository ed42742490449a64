"""Hooks (SPEC section 13) on Dagster's run-status machinery: a job per hook script, two run-status sensors.

``lineage_hooks_on_failure`` sees each failed run, ``lineage_hooks_on_success`` each successful one (both
RUNNING by default, their ticks in the UI like any sensor's). For every step of ours in the run (the
op named like the step; a hook job's run is its hook script's) whose hooks fire, the sensor requests a
run of the hook's job with ``run_key = <hook>:<event>:<step>:<run id>``: Dagster launches one run per
key and sensor, so a daemon crash between launching it and storing the cursor cannot make a second
one. The hook job's op has a RetryPolicy with exponential backoff; a hook that keeps failing is a
failed run of the hook job, the step's run is never touched.

``on_failure after=<n>`` fires once at least n runs of the step in a row failed (the step's runs are
those that planned its first asset, newest first; a hook's those of its job); ``on_recovery`` on a
success whose previous run of the step failed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dagster import (
    AssetKey,
    AssetRecordsFilter,
    Backoff,
    DagsterEventType,
    DagsterRunStatus,
    DefaultSensorStatus,
    JobDefinition,
    RetryPolicy,
    RunRequest,
    RunsFilter,
    RunStatusSensorContext,
    SensorDefinition,
    job,
    op,
    run_status_sensor,
)

from lineage_defs.parse.model import HookEvent
from lineage_defs.plan.spec import HookScript, Project, StepHook
from lineage_defs.settings import LineageSettings

FAILURE_SENSOR = "lineage_hooks_on_failure"
SUCCESS_SENSOR = "lineage_hooks_on_success"
HOOK_TAG = "lineage/hook"  # on a hook job's runs: the hook script
HISTORY = 50  # runs looked back at for a streak of failures
_STEP_EVENTS = {
    DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_RESTARTED, DagsterEventType.ASSET_CHECK_EVALUATION,
}  # fmt: skip
_DONE = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


@dataclass(frozen=True)
class Subject:
    """What hooks are attached to: a step (its op, its assets) or a hook script (its job)."""

    name: str  # the step's name (its op's), or the hook script's path
    script: str
    pipeline: str
    keys: tuple[AssetKey, ...]
    hooks: tuple[StepHook, ...]
    job: str | None = None  # a hook script's job: its runs are the subject's runs


def hook_definitions(project: Project, key_of: Mapping[str, AssetKey], settings: LineageSettings) -> tuple[list[JobDefinition], list[SensorDefinition]]:
    """The hook jobs and the run-status sensors of a project (none when no step names a hook)."""
    if not project.hook_scripts:
        return [], []
    by_step = dict(project.hooks)
    subjects = [
        Subject(s.name, s.path, s.pipeline, tuple(key_of[u] for u in s.outputs if u in key_of), by_step[s.name])
        for s in project.steps if s.name in by_step
    ]  # fmt: skip
    subjects += [Subject(h.path, h.path, h.path.split("/", 1)[0], (), h.hooks, h.job_name) for h in project.hook_scripts if h.hooks]
    jobs = {h.path: hook_job(h, settings) for h in project.hook_scripts}
    watch = Watch(subjects, {p: j.name for p, j in jobs.items()}, settings.ui_url)
    sensors = []
    kinds = {h.event for s in subjects for h in s.hooks}
    if HookEvent.FAILURE in kinds:
        sensors.append(_sensor(FAILURE_SENSOR, DagsterRunStatus.FAILURE, watch, list(jobs.values()), settings))
    if kinds & {HookEvent.SUCCESS, HookEvent.RECOVERY}:
        sensors.append(_sensor(SUCCESS_SENSOR, DagsterRunStatus.SUCCESS, watch, list(jobs.values()), settings))
    return list(jobs.values()), sensors


def hook_job(hook: HookScript, settings: LineageSettings) -> JobDefinition:
    """The job that runs one hook script; its op is retried with exponential backoff."""

    @op(
        name=op_name(hook.job_name),
        config_schema={"context": str},
        required_resource_keys={"lineage"},
        retry_policy=RetryPolicy(max_retries=settings.hook_retries, delay=settings.hook_backoff, backoff=Backoff.EXPONENTIAL),
        tags={HOOK_TAG: hook.path},
    )
    def run_hook(context):  # Dagster reads a postponed annotation as a string and refuses it
        from lineage_defs.run.hook import run_hook as run  # the run layer: imported when a hook runs

        run(context.resources.lineage.settings(), hook.path, hook.language, json.loads(context.op_config["context"]), context.log.info)

    @job(name=hook.job_name, description=f"Runs the hook script {hook.path} (lineage_defs hooks).", tags={HOOK_TAG: hook.path})
    def hook_job() -> None:
        run_hook()

    return hook_job


def op_name(job_name: str) -> str:
    """A hook job's one op (op names are unique across the code location)."""
    return f"{job_name}__run"


def _sensor(name: str, status: DagsterRunStatus, watch: Watch, jobs: Sequence[JobDefinition], settings: LineageSettings) -> SensorDefinition:
    failed = status is DagsterRunStatus.FAILURE

    @run_status_sensor(
        run_status=status,
        name=name,
        description=f"Runs the lineage_defs hooks of each {'failed' if failed else 'successful'} run of a step (on_failure)"
        if failed else "Runs the lineage_defs hooks of each successful run of a step (on_success, on_recovery)",
        monitor_all_code_locations=True,  # a run made in-process (`dagster asset materialize`) has no code location
        default_status=DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=settings.event_interval,
        request_jobs=list(jobs),
    )
    def hooks(context: RunStatusSensorContext) -> Iterator[RunRequest]:
        yield from watch.requests(context.instance, context.dagster_run, failed, context.dagster_event)

    return hooks


@dataclass
class Watch:
    """What both sensors know: the subjects, each hook's job, the UI's address."""

    subjects: list[Subject]
    jobs: Mapping[str, str]  # hook path → job name
    ui_url: str | None

    def __post_init__(self) -> None:
        self.steps = {s.name: s for s in self.subjects if s.job is None}
        self.by_job = {s.job: s for s in self.subjects if s.job is not None}

    def requests(self, instance: Any, run: Any, failed: bool, run_event: Any) -> Iterator[RunRequest]:
        """The hook runs one finished run asks for."""
        outcome = _Outcome.read(instance, run)
        if run.job_name in self.by_job:  # a run of a hook job: the hook script's own hooks
            subject = self.by_job[run.job_name]
            mine = [subject]
        elif HOOK_TAG in run.tags or run.job_name in self.jobs.values():
            return  # a hook's run whose hook has no hooks of its own
        else:
            mine = [s for s in self.steps.values() if (s.name in outcome.failed if failed else s.name in outcome.succeeded)]
            if failed and not mine and not outcome.failed:  # the run failed before any step ran
                selected = set(run.asset_selection or ())
                mine = [s for s in self.steps.values() if s.keys and set(s.keys) <= selected]
        for subject in mine:
            history = self._history(instance, subject, run.run_id)
            streak = _streak(history) if failed else 0
            for hook in subject.hooks:
                if failed and (hook.event is not HookEvent.FAILURE or streak < hook.after):
                    continue
                if not failed and hook.event is HookEvent.FAILURE:
                    continue
                if hook.event is HookEvent.RECOVERY and not (len(history) > 1 and history[1]):
                    continue
                context = self._context(hook, subject, run, outcome, run_event, streak)
                yield RunRequest(
                    run_key=f"{hook.script}:{hook.event}:{subject.name}:{run.run_id}",
                    job_name=self.jobs[hook.script],
                    run_config={"ops": {op_name(self.jobs[hook.script]): {"config": {"context": json.dumps(context, sort_keys=True)}}}},
                    tags={HOOK_TAG: hook.script, "lineage/hook_event": str(hook.event), "lineage/hook_step": subject.name, "lineage/hook_run": run.run_id},
                )

    def _history(self, instance: Any, subject: Subject, run_id: str) -> list[bool]:
        """Whether each run of the subject failed, from ``run_id`` back (finished runs only), newest first."""
        if subject.job is not None:
            ids = [r.dagster_run.run_id for r in instance.get_run_records(filters=RunsFilter(job_name=subject.job), limit=HISTORY)]
        else:
            records = instance.fetch_planned_materializations(AssetRecordsFilter(asset_key=subject.keys[0]), limit=HISTORY).records if subject.keys else []
            ids = list(dict.fromkeys(r.run_id for r in records))
        if run_id not in ids:
            ids.insert(0, run_id)
        ids = ids[ids.index(run_id):]
        runs = {r.dagster_run.run_id: r.dagster_run for r in instance.get_run_records(filters=RunsFilter(run_ids=ids))}
        out = []
        for i in ids:
            r = runs.get(i)
            if r is None or r.status not in _DONE:
                continue
            if subject.job is not None or r.status is not DagsterRunStatus.FAILURE or i == run_id:
                out.append(r.status is not DagsterRunStatus.SUCCESS)
            else:  # a failed run of several steps: did this one fail in it?
                out.append(subject.name not in _Outcome.read(instance, r).succeeded)
        return out

    def _context(self, hook: StepHook, subject: Subject, run: Any, outcome: _Outcome, run_event: Any, streak: int) -> dict[str, Any]:
        tags = run.tags
        partitions = [tags["dagster/partition"]] if "dagster/partition" in tags else []
        start, end = tags.get("dagster/asset_partition_range_start"), tags.get("dagster/asset_partition_range_end")
        if start and end:
            partitions = [start, end] if start != end else [start]
        error = outcome.errors.get(subject.name)
        if error is None and run.status is DagsterRunStatus.FAILURE:
            data = getattr(run_event, "event_specific_data", None)
            err = getattr(data, "error", None)
            error = err.message.strip() if err is not None else (getattr(run_event, "message", None) or None)
        return {
            "event": str(hook.event).removeprefix("on_"),
            "hook": hook.script,
            "step": subject.name,
            "script": subject.script,
            "pipeline": subject.pipeline,
            "asset_keys": [k.to_user_string() for k in subject.keys],
            "partitions": partitions,
            "partition_range": bool(start and end and start != end),
            "run_id": run.run_id,
            "job": run.job_name,
            "status": str(run.status.value),
            "attempt": outcome.attempts.get(subject.name, 1),
            "failures_in_a_row": streak,
            "error": error,
            "failed_checks": sorted(outcome.failed_checks.get(subject.name, ())),
            "ui_url": f"{self.ui_url}/runs/{run.run_id}" if self.ui_url else None,
        }


@dataclass
class _Outcome:
    """What one run's event log says about its steps."""

    failed: set[str]
    succeeded: set[str]
    errors: dict[str, str]
    attempts: dict[str, int]
    failed_checks: dict[str, set[str]]

    @classmethod
    def read(cls, instance: Any, run: Any) -> _Outcome:
        out = cls(set(), set(), {}, {}, {})
        for record in instance.get_records_for_run(run.run_id, of_type=_STEP_EVENTS).records:
            event = record.event_log_entry.dagster_event
            if event is None:
                continue
            step = event.step_key or ""
            if event.event_type is DagsterEventType.STEP_FAILURE:
                out.failed.add(step)
                err = event.step_failure_data.error
                out.errors[step] = _message(err)
            elif event.event_type is DagsterEventType.STEP_SUCCESS:
                out.succeeded.add(step)
            elif event.event_type is DagsterEventType.STEP_RESTARTED:
                out.attempts[step] = out.attempts.get(step, 1) + 1
            elif event.event_type is DagsterEventType.ASSET_CHECK_EVALUATION:
                data = event.asset_check_evaluation_data
                if not data.passed:
                    out.failed_checks.setdefault(step, set()).add(data.check_name)
        return out


def _message(err: Any) -> str:
    """A step's own error: the first of the error and its causes that is not Dagster's wrapper of it."""
    while err is not None:
        if err.message.strip() and not err.message.startswith("dagster._core.errors.DagsterExecutionStepExecutionError"):
            return str(err.message.strip())
        err = err.cause
    return ""


def _streak(history: Sequence[bool]) -> int:
    n = 0
    for failed in history:
        if not failed:
            break
        n += 1
    return n
