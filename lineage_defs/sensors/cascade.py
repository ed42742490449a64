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

Common to any/all: not while the step or an input is in progress; not while
any input it reads that the project produces (its deps, which hold the tables
its ``relationships`` tests read) has never been materialized for the step's
partition — for an input of another grain, none of the partitions mapped to
it (no day of a month; no partition at all, for an unpartitioned step reading
a partitioned table); and ``debounce``: not until no input changed for its
window (``UpdatedWithin``). The gate is one ``all_deps_match`` labelled
``inputs_materialized``, so the UI's Automation tab shows, input by input,
which one the step waits for. Muted reads are not dependencies at all (the
plan drops them), so they never trigger.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    AssetKey,
    AssetSelection,
    AutomationCondition,
    AutomationConditionSensorDefinition,
    DefaultSensorStatus,
    PartitionsDefinition,
    TimeWindowPartitionsDefinition,
)

from lineage_defs.parse.model import Cascade
from lineage_defs.plan.spec import AnyStep
from lineage_defs.sensors.debounce import UpdatedWithin

# A user-code automation sensor may target at most 500 entities (Dagster's limit).
SENSOR_CHUNK = 400
SENSOR_NAME = "lineage_cascade"


@functools.cache  # conditions are immutable: the subtrees every step's condition holds are built once
def _updated() -> AutomationCondition:
    return (
        AutomationCondition.newly_updated() & ~AutomationCondition.executed_with_root_target()
    ).with_label("newly_updated_without_root") | AutomationCondition.will_be_requested()


@functools.lru_cache(maxsize=1 << 12)  # conditions are immutable: steps reading the same inputs share the subtree
def _deps_updated(keys: tuple[AssetKey, ...] | None) -> AutomationCondition:
    """Any of ``keys`` (None: any of the asset's deps) updated."""
    cond = AutomationCondition.any_deps_match(_updated())
    return cond if keys is None else cond.allow(AssetSelection.assets(*keys))


def condition_for(
    step: AnyStep,
    pdefs: Mapping[str, PartitionsDefinition | None],
    key_of: Mapping[str, AssetKey],
    memo: dict[tuple[Any, ...], AutomationCondition | None] | None = None,
) -> AutomationCondition | None:
    """The step's cascade condition; None for ``trigger manual`` or a step without inputs.

    Conditions are immutable: steps whose condition has the same shape share one
    (``memo``), and a dep selection that is all of the asset's deps is left out,
    so thousands of alike steps (a dbt project) build a handful of conditions.
    """
    deps = [d for d in step.deps if d.uri in key_of]  # external inputs (no key) never update in Dagster
    if step.trigger == Cascade.MANUAL or not deps:
        return None
    own = pdefs.get(step.uri)
    every = {d.uri for d in step.deps}

    def k(ds: list[Any]) -> tuple[AssetKey, ...] | None:
        return None if {d.uri for d in ds} == every else tuple(key_of[d.uri] for d in ds)

    partitioned = [d for d in deps if pdefs.get(d.uri) is not None]
    whole = [d for d in deps if pdefs.get(d.uri) is None]
    # The gate waits for every input the project produces (the deps hold the tables the
    # data tests read too); external ones never materialize in Dagster, so they are left out.
    gate = sorted(u for u in every if u in key_of)
    gate_keys = None if len(gate) == len(every) else tuple(key_of[u] for u in gate)
    windows: dict[float, list[AssetKey]] = {}
    for d in deps:
        w = d.debounce if d.debounce is not None else step.debounce
        if w:
            windows.setdefault(float(w), []).append(key_of[d.uri])
    time_own = isinstance(own, TimeWindowPartitionsDefinition)
    trigger_gate = (partitioned or deps) if step.trigger == Cascade.ALL else []
    shape = (
        step.trigger,
        time_own,
        tuple(k([d]) for d in trigger_gate),
        k(partitioned) if partitioned else (),
        k(whole) if whole else (),
        k(deps),
        gate_keys,
        tuple(sorted((w, tuple(keys)) for w, keys in windows.items())),
    )
    if memo is not None and shape in memo:
        return memo[shape]
    cond = _build(step.trigger, time_own, shape, bool(partitioned), bool(whole), windows)
    if memo is not None:
        memo[shape] = cond
    return cond


def inputs_materialized(keys: tuple[AssetKey, ...] | None = None) -> AutomationCondition:
    """True for the partitions whose every input (of ``keys``; None: every dep) was materialized for
    them — some partition mapped to them, for an input of another grain — or is requested on this
    very tick. Evaluated input by input: the UI lists each with its own result."""
    cond = _all_inputs_present()
    if keys is not None:
        cond = cond.allow(AssetSelection.assets(*keys))
    return cond.with_label("inputs_materialized")


@functools.cache
def _all_inputs_present() -> Any:  # a DepsAutomationCondition (Dagster's private module names it)
    present = (~AutomationCondition.missing() | AutomationCondition.will_be_requested()).with_label("materialized_or_requested")
    return AutomationCondition.all_deps_match(present)


@functools.cache
def _not_in_progress() -> AutomationCondition:
    return ~AutomationCondition.any_deps_in_progress() & ~AutomationCondition.in_progress()


def _build(trigger: Cascade, time_own: bool, shape: tuple[Any, ...], partitioned: bool, whole: bool, windows: Mapping[float, list[AssetKey]]) -> AutomationCondition:
    _, _, trigger_gate, partitioned_keys, whole_keys, all_keys, gate_keys, _ = shape
    if trigger == Cascade.ALL:
        pending = _deps_updated(trigger_gate[0]).since_last_handled()
        for keys in trigger_gate[1:]:
            pending = pending & _deps_updated(keys).since_last_handled()
        pending = pending.with_label("all_inputs_updated_since_last_run")
    else:
        if time_own:
            triggers = [_deps_updated(partitioned_keys)] if partitioned else []
            if whole:
                triggers.append(_deps_updated(whole_keys) & AutomationCondition.in_latest_time_window())
        else:
            triggers = [_deps_updated(all_keys)]
        either = triggers[0]
        for t in triggers[1:]:
            either = either | t
        pending = either.since_last_handled().with_label("any_input_updated_since_last_run")

    cond = pending & _not_in_progress()
    if gate_keys != ():
        cond = cond & inputs_materialized(gate_keys)
    for w, keys in sorted(windows.items()):
        recent = AutomationCondition.any_deps_match(UpdatedWithin(w)).allow(AssetSelection.assets(*keys))
        cond = cond & ~recent.with_label(f"debounce_{w:g}s")
    return cond.with_label(f"lineage: trigger {trigger}")


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
