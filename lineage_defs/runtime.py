"""The helper a Python step imports (SPEC section 4)::

    from lineage_defs import runtime

    p = runtime.partition()            # None, or .key/.start/.end
    con = runtime.connect()            # DuckDB with `lake` and `warehouse` attached (and a dbt project's own DuckDB file the step reads)
    df = con.sql("SELECT ... FROM lake.orders WHERE ...").df()
    runtime.write(df)                  # managed write to the script's `materialize` target

Runs inside the step's subprocess: the parent op (a Dagster Pipes session)
hands over the step as it planned it, the partition and the trigger's batch
(``lineage_defs.run.contract``), and the connections as ``LINEAGE_*``
variables. Run by hand outside Dagster, ``write`` plans the folder itself
and writes against ``LINEAGE_STATE_DIR``, for local debugging.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, RunError
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.run.context import PartitionWindow
from lineage_defs.run.contract import current, pipes
from lineage_defs.settings import LineageSettings

__all__ = ["connect", "events", "log", "partition", "path", "report", "write"]

_session: Any = None
_reported: dict[str, Any] = {}


def log(message: str) -> None:
    """A log line in the Dagster run (printed when the script runs outside Dagster)."""
    if (p := pipes()) is not None:
        p.log.info(message)
    else:
        print(message, flush=True)


def partition() -> PartitionWindow | None:
    """The partition being built: ``key``, ``start`` and ``end`` (datetimes, end exclusive), or None."""
    ctx = current()
    if ctx is not None:
        return ctx.window
    key = os.environ.get("PARTITION")  # a script run by hand, outside Dagster
    if key is None:
        return None
    start, end = os.environ.get("PARTITION_START"), os.environ.get("PARTITION_END")
    return PartitionWindow(key, dt.datetime.fromisoformat(start) if start else None, dt.datetime.fromisoformat(end) if end else None)


def _settings() -> LineageSettings:
    return LineageSettings.from_env(os.environ)  # what the parent op passed (LineageSettings.to_env)


def _get_session(writing: ScriptStep | None = None) -> Any:
    """The script's one session. ``write`` alone (``writing``) attaches only the defaults the step names
    (a lake-only step opens no warehouse file under the state dir); ``connect`` attaches both."""
    global _session
    if _session is None:
        from lineage_defs.run.sql_step import unused_defaults
        from lineage_defs.run.substrates import Session

        _session = Session(_settings(), skip=unused_defaults(writing, code_may_name_any=False) if writing else frozenset())
        ctx = current()
        for catalog, file in ctx.step.attach if ctx else ():  # a dbt project's own DuckDB database the step reads
            _session.attach_file(file, catalog, Location(ctx.step.path) if ctx else None)
    if writing is None:
        for alias, substrate in uris.DEFAULT_CATALOGS.items():
            if substrate not in _session.aliases:
                _session.attach(substrate, alias)
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
    ctx = current()
    if ctx is None or not ctx.events_file or not os.path.exists(ctx.events_file):
        return []
    with open(ctx.events_file) as f:
        return list(json.load(f))


def report(**metadata: Any) -> None:
    """Extra metadata for this materialization (shown in the UI beside the runtime's own)."""
    _reported.update(metadata)


def _step() -> ScriptStep:
    """The step this script is: as the parent op planned it, else (run by hand) as the folder's plan has it."""
    ctx = current()
    step = ctx.step if ctx is not None else _planned_step()
    m = step.materialize
    if m is None or m.manual:
        raise RunError("runtime.write() needs a managed 'materialize' line", Location(step.path), "add '# materialize <uri>' (without manual) to the script header")
    return step


def _planned_step() -> ScriptStep:
    import __main__

    from lineage_defs.project import load_project

    main = getattr(__main__, "__file__", None)
    if not main:
        raise RunError("runtime.write() does not know which script is running", fix="run the step through Dagster, or run the script file itself")
    settings = _settings()
    rel = Path(os.path.relpath(os.path.abspath(main), settings.pipelines_dir)).as_posix()
    project = load_project(settings.pipelines_dir, settings)
    step = next((s for s in project.scripts if s.path == rel), None)
    if step is None:
        problems = "; ".join(e.headline() for e in project.errors if e.path == rel)
        raise RunError(f"{rel} is not a step of {settings.pipelines_dir}{': ' + problems if problems else ''}", Location(rel), "check LINEAGE_PIPELINES_DIR and the script's '# pipeline' header (lineage-defs check)")
    return step


def write(data: Any) -> dict[str, Any]:
    """Managed write of a pandas DataFrame or Arrow table to the script's target.

    Same strategies as SQL steps, one transaction, data tests audited before
    commit. Returns what was written (rows, schema, snapshot id).
    """
    import pyarrow as pa

    from lineage_defs.run.checks import CheckFailed
    from lineage_defs.run.events import RunBatch
    from lineage_defs.run.inputs import InputMissing
    from lineage_defs.run.sql_step import SliceResult, StepRunner

    table = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
    step = _step()
    untyped = [f.name for f in table.schema if pa.types.is_null(f.type)]
    if untyped:  # an empty (or all-None) object column: a table created from it would guess the type
        message = (f"{step.path}: column{'s' * (len(untyped) > 1)} {', '.join(untyped)} ha{'ve' if len(untyped) > 1 else 's'} no type "
                   "(an empty or all-None pandas column); a new table would get INTEGER for it — give the DataFrame dtypes")
        if (p := pipes()) is not None:
            p.log.warning(message)
        else:
            print(message, file=sys.stderr, flush=True)
    session = _get_session(step)
    ctx = current()
    # the run's batch id goes into the write's ledger: a retried run writes it once
    batch = RunBatch(ctx.batch, "", ()) if ctx is not None and ctx.batch else None
    runner = StepRunner(session.settings, step, session=session, batch=batch)
    runner.stage_arrow(table)
    window = partition()
    try:
        result = runner.write_slice(window)
    except (CheckFailed, InputMissing) as e:
        if ctx is not None:
            failed = SliceResult(window.key if window else None, step.uri, checks=e.outcomes if isinstance(e, CheckFailed) else e.checks)
            Path(ctx.result_file).write_text(failed.report().to_json())
        raise
    report = result.report()
    report = dataclasses.replace(report, sql=(f"-- staged {table.num_rows} rows from Python", *report.sql), reported=dict(_reported))
    if ctx is not None:
        Path(ctx.result_file).write_text(report.to_json())
    return json.loads(report.to_json())
