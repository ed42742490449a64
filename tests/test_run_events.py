"""A triggered run's batch as `_events` in a PostgreSQL (`.pg.sql`) step: loaded by COPY into the step's
session, the same batch re-executed writes nothing twice, a run by hand sees an empty table."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import dagster as dg

from lineage_defs import LineageSettings, build_definitions
from lineage_defs.events.store import EventStore, NewEvent
from lineage_defs.project import load_project
from lineage_defs.run.events import BATCH_TAG, streams_of

STEP = """\
-- Payments posted to the hook, kept on the server.
-- pipeline
-- on webhook
-- materialize datatable://crm/payments_{tag} append
SELECT value::jsonb ->> 'id' AS id, key, headers ->> 'x-src' AS src, "timestamp" AS at, topic, "offset"
FROM _events
"""

HOSTILE = "a'); DROP TABLE payments; --"


def test_postgres_step_reads_its_batch_as_events(tmp_path: Path, pg_dsn: str) -> None:
    import psycopg

    tag = tmp_path.name[-8:].lower().replace("-", "_")
    root, state = tmp_path / "p", tmp_path / "s"
    (root / "hooks").mkdir(parents=True)
    (root / "hooks" / "payments.pg.sql").write_text(textwrap.dedent(STEP.format(tag=tag)))
    project = load_project(root)
    (step,) = project.steps
    assert step.deps == ()  # `_events` is the batch, not an upstream table
    (stream,) = streams_of(step)

    with EventStore(LineageSettings(state_dir=str(state)).events_store) as store:
        store.add(stream, [
            NewEvent("1", b'{"id": "p1"}', key=b"k1", headers=[("x-src", "shop")], timestamp=1_735_732_800_000, topic="hooks--payments", offset=0),
            NewEvent("2", ('{"id": "%s"}' % HOSTILE.replace('"', '\\"')).encode(), key=b"k\x00two", headers=[("x-src", "o'brien")], topic="hooks--payments", offset=1),
        ])
        (batch,) = store.cut_batches(stream, max_batch=10)

    defs = build_definitions(root, settings=LineageSettings(state_dir=str(state), postgres_dsn=pg_dsn))
    key = dg.AssetKey(["datatable", "crm", f"payments_{tag}"])

    def materialize(instance: dg.DagsterInstance, **tags: str) -> Any:
        r = dg.materialize(defs.assets, instance=instance, resources=defs.resources, selection=[key], tags=tags, raise_on_error=False)
        assert r.success, [str(e.event_specific_data.error) for e in r.all_events if e.event_type_value == "STEP_FAILURE"]
        return r

    def rows() -> list[tuple[Any, ...]]:
        with psycopg.connect(pg_dsn) as c:
            return c.execute(f'SELECT id, key, src, at, topic, "offset" FROM payments_{tag} ORDER BY "offset"').fetchall()

    with dg.instance_for_test() as instance:
        materialize(instance, **{BATCH_TAG: batch.id})
        got = rows()
        assert [(r[0], r[1], r[2], r[4], r[5]) for r in got] == [
            ("p1", "k1", "shop", "hooks--payments", 0),
            (HOSTILE, "k\ufffdtwo", "o'brien", "hooks--payments", 1),  # PostgreSQL text holds no NUL
        ]
        assert got[0][3].isoformat() == "2025-01-01T12:00:00+00:00" and got[1][3] is None
        # the same batch again (a retry or re-execution): the ledger says it is in, nothing is appended
        materialize(instance, **{BATCH_TAG: batch.id})
        assert len(rows()) == 2
        # by hand, without a batch: `_events` is there and empty
        materialize(instance)
        assert len(rows()) == 2
