"""``trigger any|all|manual`` and ``debounce`` → an AutomationCondition per step, and the sensor that evaluates them.

Built from Dagster's own operators (``dagster/_core/definitions/declarative_automation``):

- **any** (default): some input updated (a run of the upstream that did not
  also run this step, or the upstream requested on this very tick) since this
  step last ran or was requested. Partitioned inputs map through the
  dependency's partition mapping, so the updated partition flows down the
  chain (a day feeds the same day; days feed their month). An update of an
  unpartitioned input re-runs only the latest time window of a time-
  partitioned step (like ``eager``), not its whole history.
- **all**: every partition-bearing input (all inputs when none bears
  partitions) updated for the same partition since this step last ran.
- **manual**: no condition.

Common to any/all: not while the step or an input is in progress, not while
an input produced by the project is missing for that partition (inputs at a
coarser grain — days feeding a month — never block), and ``debounce``: not
until no input changed for its window (``UpdatedWithin``). Muted reads are
not dependencies at all (the plan drops them), so they never trigger.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

from dagster import (
    AssetKey,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from lineage_defs.plan.spec import Project, StepSpec
from lineage_defs.sensors.debounce import UpdatedWithin

# A user-code automation sensor may target at most 500 entities (Dagster's limit).
SENSOR_CHUNK = 400
SENSOR_NAME = "lineage_cascade"


def _updated() -> AutomationCondition:
    return (
        AutomationCondition.newly_updated() & ~AutomationCondition.executed_with_root_target()
    ).with_label("newly_updated_without_root") | AutomationCondition.will_be_requested()


def _deps_updated(keys: Sequence[AssetKey]) -> AutomationCondition:
    return AutomationCondition.any_deps_match(_updated()).allow(AssetSelection.assets(*keys))


def condition_for(
    step: StepSpec,
    project: Project,
    pdefs: Mapping[str, PartitionsDefinition | None],
    key_of: Mapping[str, AssetKey],
) -> AutomationCondition | None:
    """The step's cascade condition; None for ``trigger manual`` or a step without inputs."""
    produced = {u for s in project.steps for u in s.outputs}
    deps = [d for d in step.deps if d.uri in produced]  # external inputs never update in Dagster
    if step.trigger == "manual" or not deps:
        return None
    own = pdefs.get(step.uri)
    partitioned = [d for d in deps if pdefs.get(d.uri) is not None]
    whole = [d for d in deps if pdefs.get(d.uri) is None]
    k = lambda ds: [key_of[d.uri] for d in ds]  # noqa: E731

    if step.trigger == "all":
        gate = partitioned or deps
        pending = _deps_updated([key_of[gate[0].uri]]).since_last_handled()
        for d in gate[1:]:
            pending = pending & _deps_updated([key_of[d.uri]]).since_last_handled()
        pending = pending.with_label("all_inputs_updated_since_last_run")
    else:
        if isinstance(own, TimeWindowPartitionsDefinition):
            triggers = [_deps_updated(k(partitioned))] if partitioned else []
            if whole:
                triggers.append(_deps_updated(k(whole)) & AutomationCondition.in_latest_time_window())
        else:
            triggers = [_deps_updated(k(deps))]
        either = triggers[0]
        for t in triggers[1:]:
            either = either | t
        pending = either.since_last_handled().with_label("any_input_updated_since_last_run")

    cond = pending & ~AutomationCondition.any_deps_in_progress() & ~AutomationCondition.in_progress()
    blocking = [d for d in deps if _same_grain(pdefs.get(d.uri), own)]
    if blocking:
        missing = AutomationCondition.missing() & ~AutomationCondition.will_be_requested()
        cond = cond & ~AutomationCondition.any_deps_match(missing).allow(AssetSelection.assets(*k(blocking))).with_label("an_input_is_missing")
    windows: dict[float, list[AssetKey]] = {}
    for d in deps:
        w = d.debounce if d.debounce is not None else step.debounce
        if w:
            windows.setdefault(float(w), []).append(key_of[d.uri])
    for w, keys in sorted(windows.items()):
        recent = AutomationCondition.any_deps_match(UpdatedWithin(w)).allow(AssetSelection.assets(*keys))
        cond = cond & ~recent.with_label(f"debounce_{w:g}s")
    return cond.with_label(f"lineage: trigger {step.trigger}")


def _same_grain(upstream: PartitionsDefinition | None, downstream: PartitionsDefinition | None) -> bool:
    """Whether a missing upstream blocks: unpartitioned inputs, and partitions of the same kind and grain."""
    if upstream is None:
        return True
    if downstream is None:
        return False  # an unpartitioned step reading a partitioned input: some partitions are always missing
    if isinstance(upstream, TimeWindowPartitionsDefinition) and isinstance(downstream, TimeWindowPartitionsDefinition):
        return upstream.cron_schedule == downstream.cron_schedule and upstream.timezone == downstream.timezone
    return type(upstream) is type(downstream)


def cascade_sensors(keys: Sequence[AssetKey], interval: int) -> list[AutomationConditionSensorDefinition]:
    """The project's own automation sensors, RUNNING by default (Dagster's default one is STOPPED in open source)."""
    out = []
    ordered = sorted(keys, key=lambda k: k.to_user_string())
    for i in range(0, len(ordered), SENSOR_CHUNK):
        chunk = ordered[i : i + SENSOR_CHUNK]
        with warnings.catch_warnings():  # use_user_code_server is beta; it is what runs custom conditions
            warnings.simplefilter("ignore")
            sensor = AutomationConditionSensorDefinition(
                SENSOR_NAME if i == 0 else f"{SENSOR_NAME}_{i // SENSOR_CHUNK + 1}",
                target=AssetSelection.assets(*chunk),
                default_status=DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=interval,
                use_user_code_server=True,  # the debounce is a custom condition
                description="Runs steps when their inputs update (trigger any|all, debounce): lineage_defs' cascade.",
            )
        out.append(sensor)
    return out
