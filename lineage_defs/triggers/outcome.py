"""A batch's runs → what happens to the batch next: the one place "done" is decided.

A batch is **done when a run of it succeeded** — not when it has a run. Until
then it is run again (SPEC section 6, "until it succeeds"), by two layers:

1. Dagster's run retries, at once: every run a sensor asks for carries
   ``dagster/max_retries`` (``LineageSettings.batch_retries``) and
   ``dagster/retry_on_asset_or_op_failure``, so the daemon re-executes a run
   that failed, or whose worker died (run monitoring marks it failed), with
   the parent's tags — the same batch. A retry Dagster announced
   (``dagster/will_retry``) and did not launch within ``RETRY_LAUNCH_GRACE``
   is left to the next layer.
2. The sensor's attempts, with backoff: when a batch's runs all ended without
   success and Dagster will not retry again, the sensor asks for a new run
   (a new run key) ``batch_backoff × 2^(n-1)`` seconds after the last one
   ended, up to ``batch_attempts`` requests; then the batch has **failed**:
   the sensor says so in every tick's skip reason and on the last run's
   event log, and ``lineage-defs events replay <batch>`` starts a fresh series
   of attempts.

A run whose worker died stays STARTED (or STARTING) until something fails
it: run monitoring, when the instance has it (the repository's
``dagster.yaml``); on an instance without it (a fresh ``DAGSTER_HOME``),
``reap`` — each tick, for the batches' runs in progress whose worker is
provably gone (``dagster_storage.dead_worker``). The batch then goes on as
after any failed run.

``verdict`` is pure (fixed inputs in the tests); ``batch_runs`` reads the
runs from the instance. The target's ledger makes every run after the first
that wrote a no-op, so running a batch again is always safe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from lineage_defs.events.store import BATCH_TAG

# Tags of a batch's runs (next to BATCH_TAG and STREAM_TAG): which request of which replay it is.
ATTEMPT_TAG = "lineage/attempt"
REPLAY_TAG = "lineage/replay"
GAVE_UP_TAG = "lineage/gave_up"
# Dagster's own run tags (documented): the automatic retries of one request.
MAX_RETRIES_TAG = "dagster/max_retries"
RETRY_ON_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"
WILL_RETRY_TAG = "dagster/will_retry"
# Dagster stores a run's FAILURE, then tags it ``dagster/will_retry`` (a second write: a reader can come
# between them; a worker that dies there leaves the tag to the run-retry daemon). A failed run without the
# tag, on an instance with run retries on, is not yet decided for this long after it ended.
RETRY_DECISION_GRACE = 60.0
# Dagster's run-retry daemon reads each run failure once, from the event log, together with the run; Dagster
# writes the failure event before the run's FAILURE status, so a failure read between the two is passed over
# for good (CI, 2026-12-07: a run failed by run monitoring's start timeout, tagged will_retry, never retried;
# the batch said "retrying" until the test gave up). A run tagged will_retry with no retry this long after it
# ended is taken as passed over: the sensor's attempts go on, and the sensor first sets its tag to false, so
# a retry Dagster makes late cannot double the next attempt.
RETRY_LAUNCH_GRACE = 60.0

_FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}


class Next(StrEnum):
    DONE = "done"  # a run succeeded
    RUNNING = "running"  # a run is queued, starting or executing
    RETRYING = "retrying"  # the last run failed and Dagster will retry it
    WAITING = "waiting"  # backing off before the next attempt
    ASK = "ask"  # ask for a run now (``run_key``)
    GIVE_UP = "give up"  # attempts ran out


@dataclass(frozen=True)
class Policy:
    attempts: int = 3  # runs the sensor asks for per batch (each with Dagster's retries)
    backoff: float = 30.0  # seconds after the first failed attempt; doubled after each
    retries: int = 2  # Dagster's automatic retries of each requested run


@dataclass(frozen=True)
class RunInfo:
    """What the decision needs of one run of a batch."""

    run_id: str
    status: str  # DagsterRunStatus value
    created: float
    ended: float | None = None
    attempt: int = 1  # ATTEMPT_TAG: the sensor request it belongs to (a Dagster retry keeps its parent's)
    replay: int = 0  # REPLAY_TAG
    will_retry: bool = False  # WILL_RETRY_TAG: Dagster has decided to retry this failed run
    retry_undecided: bool = False  # failed, retries on, and Dagster has not yet written WILL_RETRY_TAG

    @property
    def finished(self) -> bool:
        return self.status in _FINISHED


@dataclass(frozen=True)
class Verdict:
    next: Next
    reason: str
    runs: int = 0  # runs of this batch so far
    attempt: int = 0  # the request to make (ASK) or the last one made
    run_key: str | None = None  # ASK: the new run's key
    last_run: str | None = None
    wait: float = 0.0  # WAITING: seconds until the next attempt
    retry_lost: str | None = None  # a failed run Dagster said it would retry and did not (RETRY_LAUNCH_GRACE)


def run_key(batch: str, replay: int, attempt: int) -> str:
    """The batch id for its first run (Dagster never launches a run key twice), a suffix for later ones."""
    return batch if (replay, attempt) == (0, 1) else f"{batch}/{replay}.{attempt}"


def verdict(batch: str, replay: int, runs: Sequence[RunInfo], now: float, policy: Policy) -> Verdict:
    """What to do with a batch (replayed ``replay`` times) given every run of it so far.

    >>> verdict("b-1", 0, [], 0.0, Policy()).run_key
    'b-1'
    """
    n = len(runs)
    won = next((r for r in runs if r.status == "SUCCESS"), None)
    if won is not None:
        return Verdict(Next.DONE, f"run {won.run_id} succeeded", n, won.attempt, last_run=won.run_id)
    live = next((r for r in runs if not r.finished), None)
    if live is not None:
        return Verdict(Next.RUNNING, f"run {live.run_id} is {live.status.lower()}", n, live.attempt, last_run=live.run_id)
    pending = next((r for r in runs if r.retry_undecided and now - (r.ended if r.ended is not None else r.created) < RETRY_DECISION_GRACE), None)
    if pending is not None:
        return Verdict(Next.RUNNING, f"run {pending.run_id} failed; Dagster has not yet decided whether to retry it", n, pending.attempt, last_run=pending.run_id)
    current = [r for r in runs if r.replay == replay]
    if not current:
        return Verdict(Next.ASK, "no run yet" if not runs else f"replay {replay}", n, 1, run_key(batch, replay, 1))
    last = max(current, key=lambda r: r.created)
    made = max(r.attempt for r in current)
    failed = f"{sum(1 for r in current)} run(s) failed, the last {last.run_id} ({last.status.lower()})"
    ended = last.ended if last.ended is not None else last.created
    lost = None
    if last.will_retry:
        if now - ended < RETRY_LAUNCH_GRACE:
            return Verdict(Next.RETRYING, f"{failed}; Dagster retries it", n, made, last_run=last.run_id)
        lost = last.run_id
        failed += f"; Dagster did not retry it in {RETRY_LAUNCH_GRACE:.0f} s"
    if made >= policy.attempts:
        return Verdict(Next.GIVE_UP, f"{failed}; {made} of {policy.attempts} attempts used", n, made, last_run=last.run_id, retry_lost=lost)
    due = ended + policy.backoff * 2 ** (made - 1)
    if now < due:
        return Verdict(Next.WAITING, f"{failed}; attempt {made + 1} of {policy.attempts} in {due - now:.0f} s", n, made, last_run=last.run_id, wait=due - now, retry_lost=lost)
    return Verdict(Next.ASK, f"{failed}; attempt {made + 1} of {policy.attempts}", n, made + 1, run_key(batch, replay, made + 1), last.run_id, retry_lost=lost)


def _int(text: str | None, default: int) -> int:
    return int(text) if text and text.isdigit() else default


def batch_runs(instance: Any, batch_ids: Sequence[str]) -> dict[str, list[RunInfo]]:
    """Every run of each batch in the instance (retries and re-executions carry the batch tag too)."""
    from dagster import RunsFilter

    out: dict[str, list[RunInfo]] = {b: [] for b in batch_ids}
    if not batch_ids:
        return out
    retries_on = bool(getattr(instance, "run_retries_enabled", False))
    for rec in instance.get_run_records(filters=RunsFilter(tags={BATCH_TAG: list(batch_ids)})):
        run = rec.dagster_run
        b = run.tags.get(BATCH_TAG)
        undecided = retries_on and run.status.value == "FAILURE" and WILL_RETRY_TAG not in run.tags and _int(run.tags.get(MAX_RETRIES_TAG), 0) > 0
        if b in out:
            out[b].append(
                RunInfo(
                    run_id=run.run_id,
                    status=run.status.value,
                    created=rec.create_timestamp.timestamp(),
                    ended=rec.end_time,
                    attempt=_int(run.tags.get(ATTEMPT_TAG), 1),
                    replay=_int(run.tags.get(REPLAY_TAG), 0),
                    will_retry=run.tags.get(WILL_RETRY_TAG) == "true",
                    retry_undecided=undecided,
                )
            )
    return out


def reap(instance: Any, runs: Mapping[str, Sequence[RunInfo]], now: float) -> list[tuple[str, str, str]]:
    """Fail the batches' runs in progress whose worker provably died and that nothing else in ``instance``
    would fail (``dagster_storage.unwatched``); (batch, run id, why) of each, so the caller reads the runs again."""
    from lineage_defs.dagster_storage import dead_worker, unwatched

    live = [(b, r) for b, rs in runs.items() for r in rs if r.status in ("STARTED", "STARTING")]
    watch = unwatched(instance) if live else frozenset()
    out: list[tuple[str, str, str]] = []
    for b, r in live:
        run = instance.get_run_by_id(r.run_id) if r.status in watch else None
        why = dead_worker(instance, run, now) if run is not None else None
        if why:
            instance.report_run_failed(
                run,
                f"{why}. Marked failed by lineage_defs's event sensor, which runs batch {b} again: "
                "this instance has no run monitoring to notice a dead run worker (see docs/annotations.md, \"Until it succeeds\")",
            )
            out.append((b, r.run_id, why))
    return out
