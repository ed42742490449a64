"""PostgreSQL steps (``.pg.sql``): statements run on the server with psycopg; the trailing
SELECT's rows are staged into the DuckDB session and written like any other slice."""

from __future__ import annotations

from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, RunError
from lineage_defs.events.store import Event
from lineage_defs.parse.model import Language
from lineage_defs.plan.spec import ScriptStep
from lineage_defs.run import cancel
from lineage_defs.run.compile import Compiled
from lineage_defs.run.engine import stage_table
from lineage_defs.run.events import stage_events_postgres
from lineage_defs.run.substrates import Session
from lineage_defs.settings import LineageSettings


class _ServerCancel:
    """What a cancel (``run.cancel``) does to the step's PostgreSQL connection: the server cancels its query."""

    def __init__(self, pg: Any) -> None:
        self.pg = pg

    def interrupt(self) -> None:
        cancel_safe = getattr(self.pg, "cancel_safe", None)  # psycopg 3.2+
        if cancel_safe is not None:
            cancel_safe(timeout=5)
        else:
            self.pg.cancel()


class PostgresEngine:
    language = Language.POSTGRES
    paramstyle = "pyformat"
    in_session = False

    def __init__(self, settings: LineageSettings, step: ScriptStep, session: Session) -> None:
        self.settings = settings
        self.session = session
        self.path = step.path  # named when the connection fails
        # the connection the step's target names (``datatable://<name>/…``), else the default one
        self.name = uris.parse(step.uri).authority if uris.kind_of(step.uri) == uris.Kind.DATATABLE else "default"
        self.pg: Any = None
        self._cancel: _ServerCancel | None = None

    def open(self, events: tuple[Event, ...] | None) -> None:
        import psycopg

        failure = None
        try:
            self.pg = psycopg.connect(self.settings.dsn(self.name), autocommit=False)
        except psycopg.Error as e:
            failure = self.session.redact(str(e))
        if failure is not None:  # raised outside the handler: no chained error quoting the DSN
            raise RunError(f"could not connect to PostgreSQL for datatable://{self.name}: {failure}", Location(self.path),
                           f"check LINEAGE_PG_DSN_{self.name.upper()} / LINEAGE_PG_DSN")
        self._cancel = _ServerCancel(self.pg)
        cancel.track(self._cancel)
        if events is not None:
            stage_events_postgres(self.pg, events)  # `_events`, a TEMP table of the PostgreSQL session

    def execute(self, statement: Compiled, where: Location) -> None:
        cancel.raise_if_cancelled()
        with self.pg.cursor() as cur:
            try:
                cur.execute(statement.sql, statement.params or None)
            except Exception as e:
                raise RunError(f"statement failed: {e}", where, "fix the statement shown above") from e

    def commit(self) -> None:
        cancel.raise_if_cancelled()
        self.pg.commit()

    def stage(self, select: Compiled, where: Location, sql: list[str]) -> int | None:
        cancel.raise_if_cancelled()
        with self.pg.cursor() as cur:
            try:
                cur.execute(select.sql, select.params or None)
                description = list(cur.description or ())
                rows = cur.fetchall()
            except Exception as e:
                raise RunError(f"statement failed: {e}", where, "fix the statement shown above") from e
        sql.append(select.sql)
        self.pg.rollback()  # the SELECT's session state is not the write; the write goes through the target
        from lineage_defs.run.pg_arrow import arrow_table

        table = arrow_table(description, rows, self._type_name)
        stage_table(self.session.conn, table)
        return int(table.num_rows)

    def _type_name(self, oid: int) -> str | None:
        info = self.pg.adapters.types.get(oid)  # an array's oid gives its element's info
        if info is None:
            return None
        return f"_{info.name}" if oid == info.array_oid and oid != info.oid else str(info.name)

    def rollback(self) -> None:
        if self.pg is not None:
            self.pg.rollback()

    def close(self) -> None:
        if self._cancel is not None:
            cancel.untrack(self._cancel)
        if self.pg is not None:
            self.pg.close()
