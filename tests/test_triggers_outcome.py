"""A batch's runs → what happens next (``triggers.outcome.verdict``): fixed inputs, no Dagster needed.

Done means a run succeeded; a run in flight is waited for; a failure Dagster
retries is left to Dagster; otherwise the sensor asks again after a doubling
backoff, with a new run key, until its attempts run out, and a replay starts
a fresh series.
"""

from __future__ import annotations

from lineage_defs.triggers.outcome import Next, Policy, RunInfo, run_key, verdict

P = Policy(attempts=3, backoff=30.0, retries=2)


def run(i: str, status: str, created: float, ended: float | None = None, attempt: int = 1, replay: int = 0, will_retry: bool = False) -> RunInfo:
    return RunInfo(i, status, created, ended, attempt, replay, will_retry)


def test_the_first_run_is_asked_for_under_the_batch_id() -> None:
    v = verdict("s-1", 0, [], 100.0, P)
    assert (v.next, v.run_key, v.attempt) == (Next.ASK, "s-1", 1)


def test_done_means_a_run_succeeded_not_that_one_exists() -> None:
    failed = run("r1", "FAILURE", 0, 10)
    assert verdict("s-1", 0, [failed], 11.0, P).next is Next.WAITING
    assert verdict("s-1", 0, [failed, run("r2", "SUCCESS", 12, 20)], 21.0, P).next is Next.DONE
    # a success from before a replay still counts: the batch is in the target
    assert verdict("s-1", 1, [run("r2", "SUCCESS", 12, 20)], 21.0, P).next is Next.DONE


def test_a_run_in_flight_is_waited_for_whatever_else_happened() -> None:
    for status in ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"):
        v = verdict("s-1", 0, [run("r1", "FAILURE", 0, 5), run("r2", status, 6)], 1000.0, P)
        assert (v.next, v.last_run) == (Next.RUNNING, "r2"), status


def test_a_failure_dagster_will_retry_is_left_to_dagster() -> None:
    v = verdict("s-1", 0, [run("r1", "FAILURE", 0, 5, will_retry=True)], 5 + 59.0, P)
    assert (v.next, v.retry_lost) == (Next.RETRYING, None)
    # its retry failed too and Dagster's retries are used up: the sensor's backoff takes over
    runs = [run("r1", "FAILURE", 0, 5, will_retry=True), run("r2", "FAILURE", 6, 8)]
    v = verdict("s-1", 0, runs, 9.0, P)
    assert (v.next, round(v.wait)) == (Next.WAITING, 29)


def test_a_retry_dagster_announced_and_never_launched_goes_on_as_the_sensors_next_attempt() -> None:
    """Dagster's run-retry daemon reads a failure once, with the run; a failure it read before the run's
    FAILURE status was written is passed over for good, though the run says ``dagster/will_retry`` (CI saw a
    batch "retrying" for six minutes). After RETRY_LAUNCH_GRACE the sensor's attempts go on, naming the run."""
    announced = run("r1", "FAILURE", 0, 5, will_retry=True)
    v = verdict("s-1", 0, [announced], 5 + 61.0, P)
    assert (v.next, v.attempt, v.run_key, v.retry_lost) == (Next.ASK, 2, "s-1/0.2", "r1")
    assert "did not retry it in 60 s" in v.reason
    # once the sensor set the tag to false (so a late retry cannot double the attempt) it is a failure as any other
    assert verdict("s-1", 0, [run("r1", "FAILURE", 0, 5)], 5 + 61.0, P).retry_lost is None
    # the last attempt's announced retry lost: given up, as after any last failure
    v = verdict("s-1", 0, [run("r1", "FAILURE", 0, 5, attempt=3, will_retry=True)], 5 + 61.0, P)
    assert (v.next, v.retry_lost) == (Next.GIVE_UP, "r1")
    # a launched retry is the batch's last run: whatever its parent says, it is waited for
    v = verdict("s-1", 0, [announced, run("r2", "STARTED", 7)], 10_000.0, P)
    assert (v.next, v.retry_lost) == (Next.RUNNING, None)


def test_the_sensor_asks_again_after_a_doubling_backoff_then_gives_up() -> None:
    first = [run("r1", "FAILURE", 0, 10, attempt=1)]
    assert verdict("s-1", 0, first, 39.0, P).next is Next.WAITING
    v = verdict("s-1", 0, first, 40.0, P)
    assert (v.next, v.attempt, v.run_key) == (Next.ASK, 2, "s-1/0.2")
    second = [*first, run("r2", "CANCELED", 41, 50, attempt=2)]
    assert verdict("s-1", 0, second, 50 + 59.0, P).next is Next.WAITING  # 30 s × 2
    v = verdict("s-1", 0, second, 50 + 60.0, P)
    assert (v.next, v.run_key) == (Next.ASK, "s-1/0.3")
    third = [*second, run("r3", "FAILURE", 111, 120, attempt=3)]
    v = verdict("s-1", 0, third, 10_000.0, P)
    assert (v.next, v.last_run, v.runs) == (Next.GIVE_UP, "r3", 3)
    assert "3 of 3 attempts" in v.reason


def test_a_lost_request_is_asked_for_again_under_the_same_key() -> None:
    """The key comes from the runs the instance holds: a request that never became a run is made again, not skipped."""
    first = [run("r1", "FAILURE", 0, 10)]
    assert verdict("s-1", 0, first, 40.0, P).run_key == verdict("s-1", 0, first, 400.0, P).run_key == "s-1/0.2"


def test_a_replay_starts_a_fresh_series_of_attempts() -> None:
    old = [run("r1", "FAILURE", 0, 10, attempt=1), run("r2", "FAILURE", 20, 30, attempt=2), run("r3", "FAILURE", 40, 50, attempt=3)]
    assert verdict("s-1", 0, old, 1000.0, P).next is Next.GIVE_UP
    v = verdict("s-1", 1, old, 1000.0, P)
    assert (v.next, v.run_key, v.attempt) == (Next.ASK, "s-1/1.1", 1)
    v = verdict("s-1", 1, [*old, run("r4", "FAILURE", 1001, 1010, attempt=1, replay=1)], 1011.0, P)
    assert v.next is Next.WAITING


def test_run_keys_are_distinct_per_attempt_and_replay() -> None:
    keys = {run_key("s-1", g, a) for g in range(3) for a in range(1, 4)}
    assert len(keys) == 9 and run_key("s-1", 0, 1) == "s-1"


def test_a_failure_dagster_has_not_yet_tagged_is_not_taken_for_a_final_one() -> None:
    """Dagster stores FAILURE and then, in a second write, ``dagster/will_retry``: a tick between the two
    must neither give up nor ask for the next attempt (CI saw a batch given up after 3 of its 4 runs)."""
    last = run("r2", "FAILURE", 6, 8, attempt=2)
    undecided = RunInfo(last.run_id, last.status, last.created, last.ended, last.attempt, retry_undecided=True)
    policy = Policy(attempts=2, backoff=1.0)
    assert verdict("s-1", 0, [run("r1", "FAILURE", 0, 5), undecided], 9.0, policy).next is Next.RUNNING
    assert verdict("s-1", 0, [run("r1", "FAILURE", 0, 5), last], 9.0, policy).next is Next.GIVE_UP  # tagged: will not retry
    # a worker that died between the two writes: the run-retry daemon tags it; if nothing does, the grace ends
    assert verdict("s-1", 0, [run("r1", "FAILURE", 0, 5), undecided], 8 + 61.0, policy).next is Next.GIVE_UP


def test_batch_runs_marks_a_failed_run_without_the_retry_decision() -> None:
    from dagster import DagsterRunStatus, instance_for_test
    from dagster._core.test_utils import create_run_for_test

    from lineage_defs.events.store import BATCH_TAG
    from lineage_defs.triggers.outcome import MAX_RETRIES_TAG, WILL_RETRY_TAG, batch_runs

    tags = {BATCH_TAG: "b-1", MAX_RETRIES_TAG: "1"}
    with instance_for_test(overrides={"run_retries": {"enabled": True}}) as instance:
        r = create_run_for_test(instance, job_name="j", tags=tags, status=DagsterRunStatus.FAILURE)
        (info,) = batch_runs(instance, ["b-1"])["b-1"]
        assert info.retry_undecided and not info.will_retry
        instance.add_run_tags(r.run_id, {WILL_RETRY_TAG: "false"})
        (info,) = batch_runs(instance, ["b-1"])["b-1"]
        assert not info.retry_undecided
    with instance_for_test() as plain:  # retries off: Dagster never tags, nothing to wait for
        create_run_for_test(plain, job_name="j", tags=tags, status=DagsterRunStatus.FAILURE)
        (info,) = batch_runs(plain, ["b-1"])["b-1"]
        assert not info.retry_undecided
