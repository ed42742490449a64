"""The helper a Python step imports (SPEC section 4)::

    from lineage_defs import runtime

    p = runtime.partition()            # None, or .key/.start/.end
    con = runtime.connect()            # DuckDB with `lake` and `warehouse` attached
    df = con.sql("SELECT ... FROM lake.orders WHERE ...").df()
    runtime.write(df)                  # managed write to the script's `materialize` target

Runs inside the step's subprocess; the parent (a Dagster Pipes session) passes
the partition, connections and target through the environment. Outside a
run, ``write`` still works against ``LINEAGE_STATE_DIR`` for local debugging.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

from lineage_defs.run.context import PartitionWindow

__all__ = ["connect", "events", "log", "partition", "path", "report", "write"]

_session: Any = None
_reported: dict[str, Any] = {}
_pipes: Any = None  # the Dagster Pipes context when the step runs under Dagster


def use_pipes(pipes: Any) -> None:
    """Called by the step launcher: logs go to Dagster through this Pipes context."""
    global _pipes
    _pipes = pipes


def log(message: str) -> None:
    """A log line in the Dagster run (printed when the script runs outside Dagster)."""
    if _pipes is not None:
        _pipes.log.info(message)
    else:
        print(message, flush=True)


def partition() -> PartitionWindow | None:
    """The partition being built: ``key``, ``start`` and ``end`` (datetimes, end exclusive), or None."""
    key = os.environ.get("PARTITION")
    if key is None:
        return None
    start, end = os.environ.get("PARTITION_START"), os.environ.get("PARTITION_END")
    return PartitionWindow(key, dt.datetime.fromisoformat(start) if start else None, dt.datetime.fromisoformat(end) if end else None)


def _settings() -> Any:
    from lineage_defs.run.substrates import RunSettings

    return RunSettings.from_env(os.environ)  # what the parent op passed (RunSettings.to_env)


def _get_session() -> Any:
    global _session
    if _session is None:
        from lineage_defs.run.substrates import Session

        _session = Session(_settings())
        _session.use_warehouse()
    return _session


def connect() -> Any:
    """A DuckDB connection with the substrates attached as in SQL steps (``lake``, ``warehouse``)."""
    return _get_session().conn


def path(uri: str) -> str:
    """Where an ``s3://`` object lives (a local path by default, else an s3:// URL); ``{partition}`` resolved."""
    from lineage_defs.run.context import resolve_token

    loc = _settings().object_location(resolve_token(uri, partition()))
    if not loc.startswith("s3://"):
        Path(loc).parent.mkdir(parents=True, exist_ok=True)
    return loc


def events() -> list[dict[str, Any]]:
    """The trigger's batch of events for this run (Kafka messages, webhook posts); empty when none.

    Each is a dict: ``key``, ``value`` (text), ``headers`` (dict), ``timestamp``
    (epoch ms), ``topic``, ``partition``, ``offset``. A re-executed run gets
    the same events.
    """
    file = os.environ.get("LINEAGE_EVENTS_FILE")
    if not file or not os.path.exists(file):
        return []
    with open(file) as f:
        return list(json.load(f))


def report(**metadata: Any) -> None:
    """Extra metadata for this materialization (shown in the UI beside the runtime's own)."""
    _reported.update(metadata)


def _step_spec() -> Any:
    from lineage_defs.errors import RunError
    from lineage_defs.parse import language_of, parse_header
    from lineage_defs.plan.spec import StepSpec, strategy_of

    rel = os.environ.get("LINEAGE_STEP_PATH")
    if not rel:
        import __main__

        main = getattr(__main__, "__file__", None)
        if not main:
            raise RunError("runtime.write() does not know which script is running", fix="run the step through Dagster, or set LINEAGE_STEP_PATH")
        root = Path(_settings().pipelines_dir)
        rel = os.path.relpath(main, root)
    text = (Path(_settings().pipelines_dir) / rel).read_text()
    header, errors = parse_header(rel, text, language_of(rel) or "python")
    if errors:
        raise errors[0]
    m = header.materialize
    if m is None or m.manual:
        raise RunError("runtime.write() needs a managed 'materialize' line", fix="add '# materialize <uri>' (without manual) to the script header")
    return StepSpec(
        name="step",
        pipeline=rel.split("/", 1)[0],
        path=rel,
        language="python",
        description="",
        outputs=(m.uri,),
        materialize=m,
        strategy=strategy_of(m, header.partitioned is not None),
        deps=(),
        partitioning=header.partitioned,
        tests=header.tests,
    )


def write(data: Any) -> dict[str, Any]:
    """Managed write of a pandas DataFrame or Arrow table to the script's target.

    Same strategies as SQL steps, one transaction, data tests audited before
    commit. Returns what was written (rows, schema, snapshot id).
    """
    import pyarrow as pa

    from lineage_defs.run.checks import CheckFailed
    from lineage_defs.run.events import RunBatch
    from lineage_defs.run.sql_step import SliceResult, StepRunner, slice_dict

    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
    step = _step_spec()
    session = _get_session()
    batch_id = os.environ.get("LINEAGE_BATCH")
    # the run's batch id goes into the write's ledger: a retried run writes it once
    batch = RunBatch(batch_id, "", ()) if batch_id else None
    runner = StepRunner(session.settings, step, session=session, batch=batch)
    runner.stage_arrow(table)
    window = partition()
    file = os.environ.get("LINEAGE_RESULT_FILE")
    try:
        result = runner.write_slice(window)
    except CheckFailed as e:
        if file:
            failed = SliceResult(window.key if window else None, step.uri, checks=e.outcomes)
            Path(file).write_text(json.dumps(slice_dict(failed), default=str))
        raise
    out = slice_dict(result)
    out["sql"] = [f"-- staged {table.num_rows} rows from Python", *out["sql"]]
    if file:
        out["reported"] = _reported
        Path(file).write_text(json.dumps(out, default=str))
    return out
