"""A local Dagster instance set up by one process before the demo's processes open it together.

On a fresh ``DAGSTER_HOME`` every Dagster process creates the SQLite run,
event and schedule storage it opens, and stamps its alembic version. Several
at once (a daemon, its code server, the webserver) race in that: seen ending
with two alembic heads in ``history/runs.db``, after which no process loads
the code location again. Opening the instance once, alone, first creates all
of it; the processes started after find it in place.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from lineage_defs.errors import LineageDefsError


def prepare_instance(home: Path | str) -> None:
    """Create (or check) the instance's storage under ``home``; raise with the fix when it is broken."""
    from dagster import DagsterInstance

    home = Path(home)
    with DagsterInstance.from_config(str(home)) as instance:  # creates every storage it configures
        instance.get_runs_count()
    check_runs_db(home)


def check_runs_db(home: Path) -> None:
    """A SQLite run storage stamped with more than one alembic version was created by two processes at once."""
    runs = home / "history" / "runs.db"
    if not runs.exists():
        return  # not SQLite run storage (dagster.yaml names another)
    with sqlite3.connect(f"file:{runs}?mode=ro", uri=True) as conn:
        try:
            heads = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
        except sqlite3.Error:
            return
    if len(heads) > 1:
        raise LineageDefsError(
            f"{runs} has {len(heads)} alembic versions ({', '.join(heads)}): several processes created it at once",
            fix=f"delete {home / 'history'}, {home / 'storage'} and {home / 'schedules'} (make clean) and start again; "
            "the demo sets the instance up alone before starting the rest",
        )
