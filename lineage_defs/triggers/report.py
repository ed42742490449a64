"""``lineage-defs events``: what the event store holds and where each batch is; ``events replay <batch>``.

Per stream: events stored, batched and rejected (the latest rejected with
their reasons), then the latest batches with their state — done, failed (with
the reason and the replay command), or open with what its runs say
(``outcome.verdict``) when the Dagster instance is reachable (``DAGSTER_HOME``).
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from lineage_defs.events.store import BatchStatus, EventStore
from lineage_defs.settings import LineageSettings
from lineage_defs.triggers.outcome import batch_runs, verdict
from lineage_defs.triggers.sensor import policy_of, replay_command


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "?"


def listing(settings: LineageSettings, instance: Any | None, stream: str | None = None, limit: int = 10) -> list[str]:
    """The report as lines of text (empty store: one line saying so)."""
    path = settings.events_where
    if not settings.events_made:
        return [f"no event store at {path} (nothing received yet, or LINEAGE_STATE_DIR points elsewhere)"]
    out: list[str] = []
    policy = policy_of(settings)
    with EventStore(settings.events_location) as store:
        streams = [stream] if stream else store.streams()
        if not streams:
            return [f"{path}: no events yet"]
        for name in streams:
            c = store.counts(name)
            out.append(
                f"{name}: {c['events']} events stored, {c['batched']} batched, {c['rejected']} rejected; "
                f"batches: {c['batches_open']} open, {c['batches_done']} done, {c['batches_failed']} failed"
            )
            n, rejected = store.rejected(name, limit)
            if n:
                out.append(f"  rejected (latest {len(rejected)} of {n}; they never run):")
                out.extend(f"    #{r.seq} {r.dedupe}: {r.reason}" for r in rejected)
            batches = store.batches(name, limit=limit)
            runs = batch_runs(instance, [b.id for b in batches if b.status is BatchStatus.OPEN]) if instance is not None else {}
            if batches:
                out.append(f"  batches (latest {len(batches)}):")
            for b in batches:
                head = f"    {b.id}  {b.size} events{f' partition {b.partition_key}' if b.partition_key else ''}, cut {_when(b.created)}"
                if b.status is BatchStatus.DONE:
                    out.append(f"{head}: done (a run succeeded)")
                elif b.status is BatchStatus.FAILED:
                    out.append(f"{head}: FAILED — {b.reason}; after fixing the cause: {replay_command(b.id)}")
                elif b.id in runs:
                    v = verdict(b.id, b.replay, runs[b.id], time.time(), policy)
                    out.append(f"{head}: open — {v.next.value}: {v.reason}")
                else:
                    out.append(f"{head}: open{' (replayed ' + str(b.replay) + '×)' if b.replay else ''}")
    return out


def replay(settings: LineageSettings, batch_id: str) -> tuple[int, str]:
    """Open a failed batch again for a fresh series of attempts; (exit code, message)."""
    path = settings.events_where
    if not settings.events_made:
        return 1, f"no event store at {path} (check LINEAGE_STATE_DIR)"
    with EventStore(settings.events_location) as store:
        before = store.batch(batch_id)
        if before is None:
            return 1, f"no batch {batch_id} in {path} (`lineage-defs events` lists them)"
        if before.status is BatchStatus.DONE:
            return 0, f"batch {batch_id} is done (a run of it succeeded): nothing to replay"
        after = store.replay(batch_id)
    assert after is not None
    return 0, (
        f"batch {batch_id} ({after.size} events of {after.stream}) is open again (replay {after.replay}): "
        f"its sensor asks for a run on its next tick, with {settings.batch_attempts} attempts"
    )
