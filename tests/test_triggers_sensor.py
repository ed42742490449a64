"""The shared event sensor (``triggers.sensor.emit``) against a real Dagster instance and real runs of the step:
a batch is done only when a run of it succeeded, a failed one is asked for again under a new key, one batch of a
stream is in flight at a time, and a failed batch is given up loudly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.events.store import BATCH_TAG, BatchStatus, EventStore, NewEvent

STEP = """-- pipeline
-- on webhook name=orders
-- materialize duckdb://warehouse/orders append
SELECT CAST(json_extract_string(value, '$.n') AS BIGINT) AS n FROM _events
"""
STREAM = "webhook:orders"


def _world(tmp_path: Path) -> tuple[LineageSettings, dg.Definitions, Any]:
    (tmp_path / "p" / "hooks").mkdir(parents=True)
    (tmp_path / "p" / "hooks" / "orders.sql").write_text(STEP)
    # no backoff: a failed batch's next attempt is due at once
    settings = LineageSettings(state_dir=str(tmp_path / "s"), pipelines_dir=str(tmp_path / "p"), batch_backoff=0.0, batch_attempts=2)
    defs = build_definitions(tmp_path / "p", settings=settings)
    sensor = next(s for s in defs.sensors if s.name == "hooks__orders__webhook_orders")
    return settings, defs, sensor


def _add(settings: LineageSettings, *ns: int) -> None:
    with EventStore(settings.events_store) as store:
        store.add(STREAM, [NewEvent(f"key:{n}", b'{"n": %d}' % n) for n in ns])


def _tick(sensor: Any, defs: dg.Definitions, instance: dg.DagsterInstance) -> Any:
    return sensor.evaluate_tick(dg.build_sensor_context(instance=instance, repository_def=defs.get_repository_def()))


def _run(defs: dg.Definitions, instance: dg.DagsterInstance, request: Any) -> bool:
    """Execute a requested run the way the daemon would: the step, with the request's tags, in this instance."""
    key = dg.AssetKey(["duckdb", "warehouse", "orders"])
    return bool(dg.materialize(defs.assets, instance=instance, resources=defs.resources, tags=dict(request.tags), selection=[key]).success)


def test_done_means_a_successful_run_and_one_batch_is_in_flight_at_a_time(tmp_path: Path) -> None:
    settings, defs, sensor = _world(tmp_path)
    _add(settings, 1, 2, 3)
    with dg.instance_for_test() as instance:
        (req,) = _tick(sensor, defs, instance).run_requests
        batch = req.tags[BATCH_TAG]
        assert req.run_key == batch and req.tags["dagster/max_retries"] == str(settings.batch_retries)
        assert req.run_config == {"execution": {"config": {"in_process": {}}}}  # one step: no second process

        # a run of the batch exists but has not finished: new events wait for it
        job = defs.resolve_implicit_global_asset_job_def()
        pending = instance.create_run_for_job(job_def=job, tags=dict(req.tags))
        _add(settings, 4)
        result = _tick(sensor, defs, instance)
        assert not result.run_requests
        assert "1 new events wait for the running batch" in (result.skip_message or "")
        instance.report_run_canceled(pending, "the test ends it")
        # canceled is not done: the batch is asked for again under a new key, and with nothing in
        # flight any more the waiting event becomes the next batch
        again, nxt = sorted(_tick(sensor, defs, instance).run_requests, key=lambda r: r.tags[BATCH_TAG] != batch)
        assert again.tags[BATCH_TAG] == batch and again.run_key == f"{batch}/0.2" and again.tags["lineage/attempt"] == "2"
        assert nxt.run_key == nxt.tags[BATCH_TAG] != batch and nxt.tags["lineage/events"] == "1"

        assert _run(defs, instance, again)
        with EventStore(settings.events_store) as store:
            assert store.batch(batch).status is BatchStatus.OPEN  # type: ignore[union-attr]  # until the sensor looks
        _tick(sensor, defs, instance)
        with EventStore(settings.events_store) as store:
            assert store.batch(batch).status is BatchStatus.DONE  # type: ignore[union-attr]


def test_a_batch_whose_attempts_ran_out_is_given_up_on_its_last_run(tmp_path: Path) -> None:
    settings, defs, sensor = _world(tmp_path)
    _add(settings, 1)
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        for attempt in (1, 2):
            (req,) = _tick(sensor, defs, instance).run_requests
            assert req.tags["lineage/attempt"] == str(attempt)
            run = instance.create_run_for_job(job_def=job, tags=dict(req.tags))
            instance.report_run_failed(run, "the upstream API is down")
        result = _tick(sensor, defs, instance)
        assert not result.run_requests
        batch = req.tags[BATCH_TAG]
        assert f"1 batch FAILED after every attempt (latest {batch}: " in (result.skip_message or "")
        assert f"lineage-defs events replay {batch}" in (result.skip_message or "")
        last = instance.get_run_by_id(run.run_id)
        assert last is not None and last.tags.get("lineage/gave_up") == "true"
        notes = [e.message for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)]
        assert any(f"gave up on batch {batch}" in (m or "") for m in notes)
        with EventStore(settings.events_store) as store:
            assert store.batch(batch).status is BatchStatus.FAILED  # type: ignore[union-attr]
            store.replay(batch)
        (replayed,) = _tick(sensor, defs, instance).run_requests
        assert replayed.run_key == f"{batch}/1.1" and replayed.tags["lineage/replay"] == "1"


def test_a_retry_dagster_announced_but_never_launched_is_the_sensors_next_attempt(tmp_path: Path, monkeypatch: Any) -> None:
    """Dagster's run-retry daemon reads a failure once; one it read before the run's FAILURE status was
    written it passes over for good, though the run says ``dagster/will_retry`` (no retry daemon runs here:
    the same for the sensor). Within the grace the batch waits for Dagster; after it, the sensor asks for
    the next attempt and sets the run's tag to false, so a late retry of Dagster's cannot double it."""
    from lineage_defs.triggers import outcome

    settings, defs, sensor = _world(tmp_path)
    _add(settings, 1)
    job = defs.resolve_implicit_global_asset_job_def()
    with dg.instance_for_test(overrides={"run_retries": {"enabled": True}}) as instance:
        (req,) = _tick(sensor, defs, instance).run_requests
        run = instance.create_run_for_job(job_def=job, tags=dict(req.tags))
        instance.report_run_failed(run, "the run worker died")
        failed = instance.get_run_by_id(run.run_id)
        assert failed is not None and failed.tags.get("dagster/will_retry") == "true"  # Dagster's decision
        waiting = _tick(sensor, defs, instance)
        assert not waiting.run_requests and "batches 1 retrying" in (waiting.skip_message or "")

        monkeypatch.setattr(outcome, "RETRY_LAUNCH_GRACE", 0.0, raising=False)  # the grace is over
        (again,) = _tick(sensor, defs, instance).run_requests
        assert again.tags[BATCH_TAG] == req.tags[BATCH_TAG] and again.tags["lineage/attempt"] == "2"
        tagged = instance.get_run_by_id(run.run_id)
        assert tagged is not None and tagged.tags.get("dagster/will_retry") == "false"
