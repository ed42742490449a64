"""Where each substrate lives, and a DuckDB connection with them attached.

The embedded default (SPEC section 1) under ``state_dir``:
``warehouse.duckdb``, ``lake/`` (the ``main`` DuckLake: ``lake/metadata.ducklake``
+ ``lake/data/``) and ``objects/`` (default object storage for ``s3:///``).

DuckDB cannot download extensions here, so the DuckLake/postgres/httpfs
extensions come from the ``duckdb-ext-*`` wheels' extension directory.
"""

from __future__ import annotations

import fcntl
import importlib.abc
import os
import re
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, RunError
from lineage_defs.run import cancel
from lineage_defs.run.quoting import ident, literal
from lineage_defs.settings import SECRET_FIELDS, LineageSettings


def extension_directory() -> str:
    import duckdb_ext  # the duckdb-ext-* wheels install into this namespace package

    return os.path.join(list(duckdb_ext.__path__)[0], "extensions")


class _PandasNotHere(importlib.abc.MetaPathFinder):
    """Makes ``import pandas`` fail in the threads listed, and only while pandas is not imported yet
    (a finder is asked only for a module that is not in ``sys.modules``)."""

    def __init__(self) -> None:
        self.threads: set[int] = set()

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: Any = None) -> None:
        if fullname == "pandas" and threading.get_ident() in self.threads:
            raise ModuleNotFoundError("No module named 'pandas' (not while lineage_defs binds a query's values)", name="pandas")
        return None


_PANDAS_NOT_HERE = _PandasNotHere()


@contextmanager
def without_pandas() -> Iterator[None]:
    """In this thread, for the block, DuckDB binds values without importing pandas.

    DuckDB's Python client imports pandas on every query with bound parameters (and on
    ``register``) to ask whether a value is one of pandas' (``NA``, a DataFrame): 0.4–0.5 s
    and ~60 MB of every run whose code never uses pandas, and a cancellation's SIGINT that
    arrives during that import is lost in it. While pandas is not imported, no value can be
    one of pandas', so the answer is "no" either way: here ``import pandas`` fails, as if it
    were not installed, which DuckDB takes for that answer. Other threads import as usual;
    once pandas is imported (by anyone), this changes nothing."""
    me = threading.get_ident()
    if "pandas" in sys.modules or me in _PANDAS_NOT_HERE.threads:
        yield
        return
    if _PANDAS_NOT_HERE not in sys.meta_path:
        sys.meta_path.insert(0, _PANDAS_NOT_HERE)
    _PANDAS_NOT_HERE.threads.add(me)
    try:
        yield
    finally:
        _PANDAS_NOT_HERE.threads.discard(me)


def execute(conn: Any, sql: str, params: Any = None) -> Any:
    """``conn.execute(sql, params)`` on a DuckDB connection, the values bound ``without_pandas``."""
    if not params:
        return conn.execute(sql)
    with without_pandas():
        return conn.execute(sql, params)


def temp_table_from_arrow(conn: Any, target: str, table: Any) -> None:
    """``CREATE OR REPLACE TEMP TABLE target`` from an Arrow table, registered for the statement only
    (``without_pandas``: DuckDB asks whether a registered object is a pandas DataFrame)."""
    with without_pandas():
        conn.register("__lineage_arrow", table)
        try:
            conn.execute(f"CREATE OR REPLACE TEMP TABLE {target} AS SELECT * FROM __lineage_arrow")
        finally:
            conn.unregister("__lineage_arrow")


class StateLock:
    """One writer at a time on the embedded DuckDB files (DuckDB locks a file per process).

    With DuckLake on a PostgreSQL catalog and a warehouse elsewhere, runs need no lock.
    """

    def __init__(self, settings: LineageSettings) -> None:
        self.path = settings.lock_file
        self.fd: int | None = None

    def __enter__(self) -> StateLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


class Session:
    """A DuckDB connection with the substrates attached, and what alias each has.

    ``aliases`` maps a substrate (``ducklake://main``, ``duckdb://warehouse``,
    ``datatable://crm``) to its catalog alias in this connection.
    """

    def __init__(self, settings: LineageSettings, attach_defaults: bool = True, skip: frozenset[str] = frozenset()) -> None:
        import duckdb

        self.settings = settings
        # Taken when the first embedded DuckDB file is attached (see StateLock):
        # a session on a PostgreSQL-catalog lake, PostgreSQL and S3 alone runs
        # concurrently with others.
        self.lock = StateLock(settings)
        self.locked = False
        self.conn: Any = None
        try:
            self.conn = duckdb.connect(config={"extension_directory": extension_directory(), "autoinstall_known_extensions": False, "autoload_known_extensions": True})
            cancel.track(self.conn)  # a cancelled run interrupts its query (run.cancel)
            self.aliases: dict[str, str] = {}
            self._s3_ready = False
            if attach_defaults:
                for alias, substrate in uris.DEFAULT_CATALOGS.items():
                    if substrate not in skip:
                        self.attach(substrate, alias)
        except BaseException:
            if self.conn is not None:
                cancel.untrack(self.conn)
                self.conn.close()  # a half-built session must not keep the connection (or the files) open
            self.lock.__exit__()
            raise

    def close(self) -> None:
        try:
            if self.conn is not None:
                # After an interrupted query (a cancelled run) DuckDB 1.4.4 keeps the connection's
                # pending state until its next statement, and close() alone then leaves the attached
                # files held: no later session of this process could attach them. One statement clears it.
                try:
                    self.conn.interrupt()  # (a query still busy stops)
                    self.conn.execute("SELECT 1")
                except Exception:
                    pass  # a broken connection is closed all the same
                cancel.untrack(self.conn)
                self.conn.close()
        finally:
            self.lock.__exit__()
            self.locked = False

    def is_embedded(self, substrate: str) -> bool:
        """A DuckDB file under the state dir (one writer process at a time)."""
        kind, _, name = substrate.partition("://")
        return kind == uris.Kind.DUCKDB or (kind == uris.Kind.DUCKLAKE and name == "main" and not self.settings.ducklake_catalog)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- attaching ----------------------------------------------------------
    def attach_sql(self, substrate: str, alias: str) -> str:
        """The real ATTACH statement for a substrate URI (``ducklake://main`` ...)."""
        kind, _, name = substrate.partition("://")
        name = name.strip("/") or uris.DEFAULT_AUTHORITY.get(kind, "")
        s = self.settings
        if kind == uris.Kind.DUCKLAKE:
            if name != "main":
                catalog = s.ducklake_catalogs.get(name.lower())
                if not catalog:
                    raise RunError(f"ducklake://{name} is not configured", fix=f"set LINEAGE_DUCKLAKE_CATALOG_{name.upper()} (only 'main' has an embedded default)")
                data = s.ducklake_data_paths.get(name.lower())
            else:
                catalog = s.ducklake_catalog or str(s.lake_catalog)
                data = s.ducklake_data_path or f"{s.lake_data}/"
            if not s.ducklake_catalog or name != "main":
                s.lake_data.mkdir(parents=True, exist_ok=True)
            opts = f" (DATA_PATH {literal(data)})" if data else ""
            if data and data.startswith("s3://"):
                self.configure_s3()
            return f"ATTACH {literal('ducklake:' + catalog)} AS {ident(alias)}{opts}"
        if kind == uris.Kind.DUCKDB:
            path = s.database_file(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            return f"ATTACH {literal(str(path))} AS {ident(alias)}"
        if kind == uris.Kind.DATATABLE:
            self.conn.execute("LOAD postgres")
            return f"ATTACH {literal(s.dsn(name))} AS {ident(alias)} (TYPE postgres)"
        raise RunError(f"cannot ATTACH '{substrate}'", fix="attach ducklake://<lake>, duckdb://<db> or datatable://<name>")

    def attach(self, substrate: str, alias: str) -> str:
        """Attach (once) and return the alias the substrate has in this connection."""
        substrate = canonical_substrate(substrate)
        if substrate in self.aliases:
            return self.aliases[substrate]
        if self.is_embedded(substrate) and not self.locked:
            self.lock.__enter__()
            self.locked = True
        # The statement holds the DSN or catalog string: the error names neither,
        # and is raised outside the handler so no exception chain carries the engine's quote of it.
        failure = None
        sql = self.attach_sql(substrate, alias)
        for attempt in range(5):
            try:
                self.conn.execute(sql)
                failure = None
                break
            except Exception as e:
                stop = cancel.interruption_of(e)
                if stop is not None:  # a cancelled run: not a connection problem
                    raise stop from None
                failure = self.redact(str(e))
                # Two processes attaching a new shared lake race to create its catalog
                # tables; the loser finds them created on the next try.
                if "Failed to initialize DuckLake" not in str(e) or self.is_embedded(substrate):
                    break
                import time

                time.sleep(0.2 * (attempt + 1))
        if failure is not None:
            raise RunError(f"could not attach {substrate} as {alias}: {failure}", fix=f"check the connection settings of {substrate} (see docs/configuration.md)")
        self.aliases[substrate] = alias
        return alias

    def attach_file(self, path: str, alias: str, where: Location | None = None) -> None:
        """Attach a DuckDB file that is no substrate (a dbt project's own target) read-only, under its database name."""
        if alias in self.aliases.values():
            return
        try:
            self.conn.execute(f"ATTACH {literal(path)} AS {ident(alias)} (READ_ONLY)")
        except Exception as e:
            raise RunError(f"could not attach the dbt database {alias} ({path}): {e}", where, f"build the dbt project that writes {path} first") from None
        self.aliases[f"file:{path}"] = alias

    def redact(self, text: str) -> str:
        """``text`` with every configured secret (DSNs, catalog strings, S3 keys, passwords) blanked out."""
        return redact(text, self.settings)

    def use_warehouse(self) -> None:
        """Unqualified names are warehouse tables, as in SQL steps."""
        home = self.aliases.get("duckdb://warehouse")
        if home:
            self.conn.execute(f"USE {ident(home)}")

    def alias_for(self, uri: str) -> str:
        """The catalog alias holding an asset URI's table, attaching it if needed."""
        u = uris.parse(uri)
        substrate = f"{u.kind}://{u.authority}"
        if substrate not in self.aliases:
            base = re.sub(r"\W", "_", f"{u.kind}_{u.authority}")
            self.attach(substrate, base)
        return self.aliases[substrate]

    def table_sql(self, uri: str) -> str:
        """The qualified SQL name of an asset's table in this connection."""
        u = uris.parse(uri)
        alias = self.alias_for(uri)
        if u.kind == uris.Kind.DATATABLE:
            schema, table = (u.path[0], u.path[1]) if len(u.path) == 2 else ("public", u.path[-1])
            return f"{ident(alias)}.{ident(schema)}.{ident(table)}"
        schema, _, table = u.table.rpartition(".")
        return f"{ident(alias)}.{ident(schema or 'main')}.{ident(table)}"

    def configure_s3(self) -> None:
        """Point DuckDB's httpfs at the configured endpoint (once per connection)."""
        if self._s3_ready:
            return
        s = self.settings
        self.conn.execute("LOAD httpfs")
        parts = ["TYPE s3"]
        if s.s3_access_key_id:
            parts += [f"KEY_ID {literal(s.s3_access_key_id)}", f"SECRET {literal(s.s3_secret_access_key or '')}"]
        if s.s3_region:
            parts.append(f"REGION {literal(s.s3_region)}")
        if s.s3_endpoint_url:
            endpoint = s.s3_endpoint_url
            use_ssl = endpoint.startswith("https://")
            endpoint = endpoint.split("://", 1)[-1].rstrip("/")
            parts += [f"ENDPOINT {literal(endpoint)}", "URL_STYLE 'path'", f"USE_SSL {'true' if use_ssl else 'false'}"]
        failure = None
        try:
            self.conn.execute(f"CREATE OR REPLACE SECRET lineage_s3 ({', '.join(parts)})")
        except Exception as e:
            failure = self.redact(str(e))
        if failure is not None:
            raise RunError(f"could not configure S3 access: {failure}", fix="check the LINEAGE_S3_* and AWS_* settings")
        self._s3_ready = True

    def object_path(self, uri: str) -> str:
        """Where an s3:// object is, ready for read_parquet/COPY in this connection."""
        loc = self.settings.object_location(uri)
        if loc.startswith("s3://"):
            self.configure_s3()
        else:
            Path(loc).parent.mkdir(parents=True, exist_ok=True)
        return loc

    def snapshot_id(self, alias: str, committed_here: bool = False) -> int | None:
        """The DuckLake snapshot id of a lake alias, None for other catalogs.

        `committed_here`: the snapshot this connection's last commit made (right
        after a write: exact even when other processes commit to the same lake,
        and a cheap lookup instead of a catalog query); the lake's current one if
        this connection has committed nothing yet.
        """
        if not any(a == alias and uris.kind_of(s) == uris.Kind.DUCKLAKE for s, a in self.aliases.items()):
            return None
        if committed_here:
            row = self.conn.execute(f"SELECT id FROM ducklake_last_committed_snapshot({literal(alias)})").fetchone()
            if row and row[0] is not None:
                return int(row[0])
        row = self.conn.execute(f"SELECT id FROM ducklake_current_snapshot({literal(alias)})").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def execute(self, sql: str, params: dict[str, Any] | None = None, where: Location | None = None) -> Any:
        cancel.raise_if_cancelled()
        try:
            return execute(self.conn, sql, params)
        except Exception as e:  # duckdb.Error has many subclasses; keep the message and say where
            if where is None:
                raise
            raise RunError(f"statement failed: {e}", where, "fix the statement shown above") from e


_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")


def redact(text: str, settings: LineageSettings) -> str:
    """Blank out secrets: every configured secret value, and any ``password=…`` or ``user:pass@`` in a DSN.

    >>> redact("failed: host=db password=hunter2 dbname=x", LineageSettings(state_dir="."))
    'failed: host=db password=<redacted> dbname=x'
    """
    for f in SECRET_FIELDS:
        value = getattr(settings, f)
        for secret in value.values() if isinstance(value, dict) else [value]:
            if secret and len(secret) >= 4:
                text = text.replace(secret, "<redacted>")
    text = _PASSWORD.sub(r"\1<redacted>", text)
    return _URL_PASSWORD.sub(r"\1<redacted>@", text)


def canonical_substrate(text: str) -> str:
    """``ducklake`` → ``ducklake://main``; ``duckdb:///`` → ``duckdb://warehouse``."""
    kind, sep, rest = text.partition("://")
    name = rest.strip("/") if sep else ""
    if not name:
        name = uris.DEFAULT_AUTHORITY.get(kind, "")
    return f"{kind}://{name}"
