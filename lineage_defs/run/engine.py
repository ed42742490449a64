"""What runs a SQL step's statements: one engine per substrate (``SqlEngine``).

A step's runner (``sql_step.StepRunner``) compiles the statements for its
engine's dialect, hands the setup statements to ``execute`` and the trailing
SELECT to ``stage``, which leaves the rows in the DuckDB session as ``SLICE``
for the step's write strategy. DuckDB steps (``.sql``, and Python steps'
writes) run in the session itself (``duckdb_engine``); PostgreSQL steps
(``.pg.sql``) run on the server (``postgres_engine``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from lineage_defs.errors import Location
from lineage_defs.events.store import Event
from lineage_defs.parse.model import Language
from lineage_defs.run.compile import Compiled
from lineage_defs.run.substrates import temp_table_from_arrow

if TYPE_CHECKING:
    from lineage_defs.plan.spec import ScriptStep
    from lineage_defs.run.substrates import Session
    from lineage_defs.settings import LineageSettings

SLICE = "__lineage_slice"  # the staged rows of one slice, a TEMP table of the DuckDB session


class SqlEngine(Protocol):
    """Runs one step's statements, partition after partition, each its own transaction."""

    language: Language  # the dialect the step's statements are compiled to and read in
    paramstyle: str  # how compiled statements spell bound parameters (``compile_statement``)
    in_session: bool  # the SELECT runs in the DuckDB session, so a write may read it directly (no staging copy)

    def __init__(self, settings: LineageSettings, step: ScriptStep, session: Session) -> None: ...

    def open(self, events: tuple[Event, ...] | None) -> None:
        """Set up before the first partition; ``events`` is a triggered run's batch (None: not triggered)."""

    def execute(self, statement: Compiled, where: Location) -> None:
        """Run one setup statement (or a manual step's statement)."""

    def commit(self) -> None:
        """A manual step's statements ran: keep what they did."""

    def stage(self, select: Compiled, where: Location, sql: list[str]) -> int | None:
        """Run the trailing SELECT into ``SLICE``; its row count (None if unknown). Appends the SQL run to ``sql``."""

    def rollback(self) -> None:
        """A partition failed: undo what its statements did on the engine."""

    def close(self) -> None: ...


def stage_table(conn: Any, table: Any) -> None:
    """An Arrow table as ``SLICE`` in the DuckDB connection."""
    temp_table_from_arrow(conn, SLICE, table)
