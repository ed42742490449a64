"""Stored events → runs: what every event trigger's sensor shares.

Each tick looks at every open batch's runs (``outcome.verdict``) and, when
none of the stream's batches is in flight, cuts its new events into batches
(one store transaction; a stream has one batch in flight at a time, so a
slow run makes the next batch bigger instead of queueing runs): a batch with a
successful run is settled done; one without a run, or whose runs failed and
are not being retried, gets a run request (``run_key`` = batch id for the
first, the tag ``lineage/batch`` so the run reads that batch, and Dagster's
retry tags); one whose attempts ran out is settled failed and reported — in
this and every later tick's skip reason, and on its last run's event log.
A request lost with a crashed daemon is simply made again next tick: the run
key is derived from the runs the instance holds, never from a counter. A run
whose worker died with it is failed by run monitoring where the instance has
it, else by the tick itself when provable (``outcome.reap``); where neither
can, the skip reason says what to add to ``dagster.yaml``. The
target's ledger makes every run of a batch after the first that wrote a
no-op.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    PartitionsDefinition,
    RunRequest,
    SensorDefinition,
    SensorResult,
    SkipReason,
    multi_or_in_process_executor,
)

from lineage_defs.assets.executor import default_executor
from lineage_defs.events.store import BATCH_TAG, STREAM_TAG, Batch, BatchStatus, EventStore
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.instance import tick_instance
from lineage_defs.triggers.pull import MAX_PER_TICK, NotConfigured, Reader, SourceUnavailable, drain
from lineage_defs.triggers.outcome import (
    ATTEMPT_TAG,
    GAVE_UP_TAG,
    MAX_RETRIES_TAG,
    REPLAY_TAG,
    RETRY_LAUNCH_GRACE,
    RETRY_ON_FAILURE_TAG,
    WILL_RETRY_TAG,
    Next,
    Policy,
    Verdict,
    batch_runs,
    reap,
    verdict,
)

DEFAULT_MAX_BATCH = 100_000  # events per batch (one run) unless `max_batch=` says otherwise
OPEN_PER_TICK = 1000  # open batches looked at per tick (oldest first)


def event_sensor(name: str, evaluate: Any, keys: Sequence[AssetKey], settings: LineageSettings, description: str) -> SensorDefinition:
    """An event trigger's sensor: targets the step's assets, RUNNING by default."""
    return SensorDefinition(
        name=name,
        evaluation_fn=evaluate,
        asset_selection=list(keys),
        minimum_interval_seconds=settings.event_interval,
        default_status=DefaultSensorStatus.RUNNING,
        description=description,
    )


def pull_sensor(
    name: str,
    description: str,
    stream: str,
    source: str,
    reader_of: Callable[[], Reader],
    keys: Sequence[AssetKey],
    pdef: PartitionsDefinition | None,
    settings: LineageSettings,
    max_batch: int | None,
) -> SensorDefinition:
    """A pull-based source's sensor: each tick drains the source into the store (``pull.drain``: stored, then
    acknowledged), then ``emit``s. ``reader_of`` raises ``NotConfigured`` (naming the variable) when the step's
    connection has no settings; a source that cannot be read skips with the reason, and batches already stored
    still get their runs. ``source`` names it in the skip reason, with what the tick read and the lag."""

    def evaluate(context: Any) -> SensorResult:
        with EventStore(settings.events_location) as store:
            try:
                got = drain(store, stream, reader_of(), max_messages=MAX_PER_TICK, budget_seconds=settings.kafka_poll_seconds)
            except NotConfigured as e:
                note = f"{e}; "
            except SourceUnavailable as e:
                note = f"{e}; "
                context.log.warning(str(e))
            else:
                note = got.note(source)
                if got.consumed:
                    context.log.info(f"{source}: read {got.consumed} messages, {got.stored} new to the store, {got.rejected} without a usable partition value")
            return emit(context, store, stream, max_batch=max_batch or DEFAULT_MAX_BATCH, pdef=pdef, settings=settings, note=note)

    return event_sensor(name, evaluate, keys, settings, description)


def policy_of(settings: LineageSettings) -> Policy:
    return Policy(attempts=settings.batch_attempts, backoff=settings.batch_backoff, retries=settings.batch_retries)


def replay_command(batch_id: str) -> str:
    return f"lineage-defs events replay {batch_id}"


def prune(context: Any, store: EventStore, stream: str, settings: LineageSettings) -> None:
    """Drop old done batches (a re-execution after that has no batch to read)."""
    old = store.old_batches(stream, time.time() - settings.batch_retention_days * 86400)
    if old:
        n = store.prune(old)
        context.log.info(f"pruned {len(old)} batches ({n} events) older than {settings.batch_retention_days:g} days whose runs succeeded")


def _report_gave_up(instance: Any, b: Batch, v: Verdict) -> None:
    """The batch's last run says, in the UI, that nothing will run it again by itself."""
    if v.last_run is None:
        return
    run = instance.get_run_by_id(v.last_run)
    if run is None:
        return
    instance.add_run_tags(run.run_id, {GAVE_UP_TAG: "true"})
    instance.report_engine_event(
        f"lineage_defs gave up on batch {b.id} of {b.stream} ({b.size} events): {v.reason}. "
        f"Nothing runs it again by itself; after fixing the cause: {replay_command(b.id)}",
        run,
    )


# A batch's run executes one step: in the run worker itself, not in a second process that
# imports Dagster and loads the code location again (seconds of every event's latency). Our
# default executor already does so for a run of one step; the explicit config says it in the run's
# config (the UI shows it) and covers Dagster's own default executor (your Definitions' choice).
IN_PROCESS: dict[str, Any] = {"execution": {"config": {"in_process": {}}}}


def run_config_of(context: Any) -> dict[str, Any] | None:
    """``IN_PROCESS`` when the runs use our or Dagster's default executor (both take that config), else None."""
    try:
        job = context.repository_def.get_implicit_global_asset_job_def()
    except Exception:  # noqa: BLE001 - no repository in this context: Dagster's default applies
        return None
    return IN_PROCESS if job.executor_def in (default_executor, multi_or_in_process_executor) else None


def request(b: Batch, v: Verdict, stream: str, pdef: PartitionsDefinition | None, policy: Policy, run_config: dict[str, Any] | None = None) -> RunRequest:
    # the clock its worker is judged by on an instance without our launcher (``dagster_storage.dead_worker``)
    from lineage_defs.dagster_storage import CLOCK_TAG, launch_clock

    clock = launch_clock()
    return RunRequest(
        run_key=v.run_key,
        run_config=run_config or {},
        partition_key=b.partition_key if pdef is not None else None,
        tags={
            BATCH_TAG: b.id,
            STREAM_TAG: stream,
            "lineage/events": str(b.size),
            ATTEMPT_TAG: str(v.attempt),
            REPLAY_TAG: str(b.replay),
            MAX_RETRIES_TAG: str(policy.retries),
            RETRY_ON_FAILURE_TAG: "true",
            **({CLOCK_TAG: clock} if clock is not None else {}),
        },
    )


def emit(
    context: Any,
    store: EventStore,
    stream: str,
    *,
    max_batch: int,
    pdef: PartitionsDefinition | None,
    settings: LineageSettings,
    note: str = "",
) -> SensorResult:
    """Settle the open batches, cut new ones when none is in flight, and ask for the runs still needed;
    a SkipReason saying what was seen when there are none."""
    prune(context, store, stream, settings)
    policy = policy_of(settings)
    now = time.time()
    pending = store.open_batches(stream, limit=OPEN_PER_TICK)
    instance = tick_instance(context)
    runs = batch_runs(instance, [b.id for b in pending])
    dead = reap(instance, runs, now)
    for batch, run_id, why in dead:
        context.log.warning(f"run {run_id} of batch {batch}: {why}; marked it failed, the batch runs again")
    if dead:
        runs = batch_runs(instance, [b.id for b in pending])
    verdicts = [(b, verdict(b.id, b.replay, runs[b.id], now, policy)) for b in pending]
    for b, v in verdicts:
        if v.retry_lost is not None:  # Dagster passed the failure over: no late retry of it beside our next attempt
            instance.add_run_tags(v.retry_lost, {WILL_RETRY_TAG: "false"})
            context.log.warning(f"run {v.retry_lost} of batch {b.id} failed and Dagster said it would retry it, but has not in {RETRY_LAUNCH_GRACE:.0f} s; the sensor's attempts take over")
    # One batch of a stream in flight at a time: what arrives meanwhile waits in the store and
    # becomes the next batch (up to max_batch) once it ended. A slow run then means bigger
    # batches, never a growing queue of small runs waiting for each other.
    in_flight = any(v.next in (Next.RUNNING, Next.RETRYING) for _, v in verdicts)
    if not in_flight:
        verdicts += [(b, verdict(b.id, b.replay, [], now, policy)) for b in store.cut_batches(stream, max_batch)]
    done: list[str] = []
    failed: dict[str, str] = {}
    todo: list[tuple[Batch, Verdict]] = []
    busy: dict[Next, int] = {}
    for b, v in verdicts:
        if v.next is Next.DONE:
            done.append(b.id)
        elif v.next is Next.GIVE_UP:
            failed[b.id] = v.reason
            _report_gave_up(instance, b, v)
            context.log.error(f"batch {b.id} ({b.size} events) failed for good: {v.reason}; replay it with `{replay_command(b.id)}`")
        elif v.next is Next.ASK and pdef is not None and b.partition_key is None:
            failed[b.id] = "its events carry no partition key, and the step is partitioned now"
        elif v.next is Next.ASK:
            todo.append((b, v))
        else:
            busy[v.next] = busy.get(v.next, 0) + 1
    store.settle(done, failed)
    todo = todo[: settings.max_runs_per_tick]

    dynamic: list[AddDynamicPartitionsRequest] = []
    if isinstance(pdef, DynamicPartitionsDefinition) and todo:
        have = set(instance.get_dynamic_partitions(str(pdef.name)))
        new = sorted({str(b.partition_key) for b, _ in todo if b.partition_key and b.partition_key not in have})
        if new:
            dynamic.append(AddDynamicPartitionsRequest(str(pdef.name), new))
    run_config = run_config_of(context) if todo else None
    requests = [request(b, v, stream, pdef, policy, run_config) for b, v in todo]
    problems = problem_note(store, stream)
    if not requests:
        counts = store.counts(stream)
        state = ", ".join(f"{n} {what.value}" for what, n in sorted(busy.items()))
        waiting = counts["events"] - counts["batched"] - counts["rejected"]
        seen = f"{counts['events']} events stored, {counts['batched']} in batches" + (f"; batches {state}" if state else "")
        if in_flight and waiting:
            seen += f"; {waiting} new events wait for the running batch"
        if in_flight:
            from lineage_defs.dagster_storage import blind_spot  # Dagster's storage internals (SQLAlchemy, alembic): not at load

            blind = blind_spot(instance)
            seen += f"; {blind}" if blind else ""
        return SensorResult(skip_reason=SkipReason(f"{note}no new batch ({seen}){problems}"), dynamic_partitions_requests=dynamic)
    if problems:
        context.log.warning(problems.lstrip("; "))
    return SensorResult(run_requests=requests, dynamic_partitions_requests=dynamic)


def problem_note(store: EventStore, stream: str) -> str:
    """What of the stream will not reach the target without a human: failed batches, rejected events."""
    out = ""
    gave_up = store.batches(stream, BatchStatus.FAILED, limit=1)
    if gave_up:
        n = store.counts(stream)["batches_failed"]
        b = gave_up[0]
        out += f"; {n} batch{'es' * (n != 1)} FAILED after every attempt (latest {b.id}: {b.reason}) — fix the cause, then `{replay_command(b.id)}`"
    rejected, latest = store.rejected(stream, limit=1)
    if rejected:
        out += f"; {rejected} event{'s' * (rejected != 1)} rejected and will not run (latest {latest[0].dedupe}: {latest[0].reason}) — `lineage-defs events` lists them"
    return out
