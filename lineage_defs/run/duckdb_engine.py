"""DuckDB steps (``.sql``; Python steps' writes): statements run in the step's DuckDB session."""

from __future__ import annotations

from lineage_defs.errors import Location
from lineage_defs.events.store import Event
from lineage_defs.parse.model import Language
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.run.compile import Compiled
from lineage_defs.run.engine import SLICE
from lineage_defs.run.events import stage_events
from lineage_defs.run.substrates import Session
from lineage_defs.settings import LineageSettings


class DuckDBEngine:
    language = Language.DUCKDB
    paramstyle = "dollar"
    in_session = True

    def __init__(self, settings: LineageSettings, step: ScriptStep, session: Session) -> None:
        self.session = session

    def open(self, events: tuple[Event, ...] | None) -> None:
        if events is not None:
            stage_events(self.session.conn, events)  # `_events`, a TEMP table of the session

    def execute(self, statement: Compiled, where: Location) -> None:
        if statement.attach:
            self.session.attach(*statement.attach)
            return
        self.session.execute(statement.sql, statement.params, where)

    def commit(self) -> None:
        pass  # the session autocommits each statement; a managed write is its own transaction

    def stage(self, select: Compiled, where: Location, sql: list[str]) -> int | None:
        stage = f"CREATE OR REPLACE TEMP TABLE {SLICE} AS {select.sql.rstrip().rstrip(';')}"
        staged = self.session.execute(stage, select.params, where).fetchone()
        sql.append(stage)
        return int(staged[0]) if staged else None

    def rollback(self) -> None:
        pass  # nothing is open between statements: the write rolls its own transaction back

    def close(self) -> None:
        pass  # the session is the runner's
