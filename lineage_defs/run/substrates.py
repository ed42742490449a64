"""Where each substrate lives, and a DuckDB connection with them attached.

The embedded default (SPEC section 1) under ``state_dir``:
``warehouse.duckdb``, ``lake/`` (the ``main`` DuckLake: ``lake/metadata.ducklake``
+ ``lake/data/``) and ``objects/`` (default object storage for ``s3:///``).

DuckDB cannot download extensions here, so the DuckLake/postgres/httpfs
extensions come from the ``duckdb-ext-*`` wheels' extension directory.
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lineage_defs import uris
from lineage_defs.errors import Location, RunError


@dataclass(frozen=True)
class RunSettings:
    """Connections for a run, resolved from the Dagster resource or the environment."""

    state_dir: str
    pipelines_dir: str = "pipelines"
    postgres_dsn: str | None = None  # datatable://<any name> unless overridden below
    postgres_dsns: dict[str, str] = field(default_factory=dict)  # per datatable name
    ducklake_catalog: str | None = None  # "postgres:dbname=... host=..." for a PostgreSQL catalog
    ducklake_data_path: str | None = None  # "s3://bucket/prefix/" for S3 data files
    s3_endpoint_url: str | None = None
    s3_bucket: str | None = None  # the bucket of s3:///<key> when object storage is S3
    s3_region: str | None = None
    s3_access_key_id: str | None = None
    s3_secret_access_key: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> RunSettings:
        """For step subprocesses: the parent passes everything as LINEAGE_* variables."""
        e = dict(os.environ if env is None else env)
        dsns = {k[len("LINEAGE_PG_DSN_"):].lower(): v for k, v in e.items() if k.startswith("LINEAGE_PG_DSN_")}
        return cls(
            state_dir=os.path.abspath(e.get("LINEAGE_STATE_DIR", ".lineage")),
            pipelines_dir=os.path.abspath(e.get("LINEAGE_PIPELINES_DIR", "pipelines")),
            postgres_dsn=e.get("LINEAGE_PG_DSN"),
            postgres_dsns=dsns,
            ducklake_catalog=e.get("LINEAGE_DUCKLAKE_CATALOG"),
            ducklake_data_path=e.get("LINEAGE_DUCKLAKE_DATA_PATH"),
            s3_endpoint_url=e.get("LINEAGE_S3_ENDPOINT_URL"),
            s3_bucket=e.get("LINEAGE_S3_BUCKET"),
            s3_region=e.get("LINEAGE_S3_REGION"),
            s3_access_key_id=e.get("AWS_ACCESS_KEY_ID"),
            s3_secret_access_key=e.get("AWS_SECRET_ACCESS_KEY"),
        )

    def to_env(self) -> dict[str, str]:
        out = {
            "LINEAGE_STATE_DIR": self.state_dir,
            "LINEAGE_PIPELINES_DIR": self.pipelines_dir,
            "LINEAGE_PG_DSN": self.postgres_dsn,
            "LINEAGE_DUCKLAKE_CATALOG": self.ducklake_catalog,
            "LINEAGE_DUCKLAKE_DATA_PATH": self.ducklake_data_path,
            "LINEAGE_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "LINEAGE_S3_BUCKET": self.s3_bucket,
            "LINEAGE_S3_REGION": self.s3_region,
            "AWS_ACCESS_KEY_ID": self.s3_access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_access_key,
        }
        out.update({f"LINEAGE_PG_DSN_{k.upper()}": v for k, v in self.postgres_dsns.items()})
        return {k: v for k, v in out.items() if v}

    # -- where things are -------------------------------------------------
    @property
    def state(self) -> Path:
        return Path(self.state_dir)

    def dsn(self, name: str) -> str:
        dsn = self.postgres_dsns.get(name.lower()) or self.postgres_dsn
        if not dsn:
            raise RunError(
                f"datatable://{name} has no PostgreSQL connection",
                fix=f"set LINEAGE_PG_DSN (or LINEAGE_PG_DSN_{name.upper()}) or the lineage resource's postgres_dsn",
            )
        return dsn

    @property
    def s3_remote(self) -> bool:
        return bool(self.s3_endpoint_url or self.s3_bucket)

    def object_location(self, uri: str) -> str:
        """Where an ``s3://`` object lives: a local path (default storage) or an s3:// URL."""
        u = uris.parse(uri)
        key = "/".join(u.path)
        if u.authority:
            return f"s3://{u.authority}/{key}"
        if self.s3_bucket:
            return f"s3://{self.s3_bucket}/{key}"
        return str(self.state / "objects" / key)


def extension_directory() -> str:
    import duckdb_ext  # the duckdb-ext-* wheels install into this namespace package

    return os.path.join(list(duckdb_ext.__path__)[0], "extensions")


def _quote_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ident(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


class StateLock:
    """One writer at a time on the embedded DuckDB files (DuckDB locks a file per process).

    With DuckLake on a PostgreSQL catalog and a warehouse elsewhere, runs need no lock.
    """

    def __init__(self, settings: RunSettings) -> None:
        self.path = settings.state / ".duckdb.lock"
        self.fd: int | None = None

    def __enter__(self) -> StateLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
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

    def __init__(self, settings: RunSettings, attach_defaults: bool = True, skip: frozenset[str] = frozenset()) -> None:
        import duckdb

        self.settings = settings
        # Taken when the first embedded DuckDB file is attached (see StateLock):
        # a session on a PostgreSQL-catalog lake, PostgreSQL and S3 alone runs
        # concurrently with others.
        self.lock = StateLock(settings)
        self.locked = False
        try:
            self.conn = duckdb.connect(config={"extension_directory": extension_directory(), "autoinstall_known_extensions": False, "autoload_known_extensions": True})
            self.aliases: dict[str, str] = {}
            self._s3_ready = False
            if attach_defaults:
                if "ducklake://main" not in skip:
                    self.attach("ducklake://main", "lake")
                if "duckdb://warehouse" not in skip:
                    self.attach("duckdb://warehouse", "warehouse")
        except BaseException:
            self.lock.__exit__()
            raise

    def close(self) -> None:
        try:
            self.conn.close()
        finally:
            self.lock.__exit__()
            self.locked = False

    def is_embedded(self, substrate: str) -> bool:
        """A DuckDB file under the state dir (one writer process at a time)."""
        kind, _, name = substrate.partition("://")
        return kind == "duckdb" or (kind == "ducklake" and name == "main" and not self.settings.ducklake_catalog)

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
        if kind == "ducklake":
            if name != "main":
                catalog = os.environ.get(f"LINEAGE_DUCKLAKE_CATALOG_{name.upper()}")
                if not catalog:
                    raise RunError(f"ducklake://{name} is not configured", fix=f"set LINEAGE_DUCKLAKE_CATALOG_{name.upper()} (only 'main' has an embedded default)")
                data = os.environ.get(f"LINEAGE_DUCKLAKE_DATA_PATH_{name.upper()}")
            else:
                catalog = s.ducklake_catalog or str(s.state / "lake" / "metadata.ducklake")
                data = s.ducklake_data_path or str(s.state / "lake" / "data") + "/"
            if not s.ducklake_catalog or name != "main":
                (s.state / "lake" / "data").mkdir(parents=True, exist_ok=True)
            opts = f" (DATA_PATH {_quote_str(data)})" if data else ""
            if data and data.startswith("s3://"):
                self.configure_s3()
            return f"ATTACH {_quote_str('ducklake:' + catalog)} AS {_ident(alias)}{opts}"
        if kind == "duckdb":
            path = s.state / f"{name}.duckdb"
            path.parent.mkdir(parents=True, exist_ok=True)
            return f"ATTACH {_quote_str(str(path))} AS {_ident(alias)}"
        if kind == "datatable":
            self.conn.execute("LOAD postgres")
            return f"ATTACH {_quote_str(s.dsn(name))} AS {_ident(alias)} (TYPE postgres)"
        raise RunError(f"cannot ATTACH '{substrate}'", fix="attach ducklake://<lake>, duckdb://<db> or datatable://<name>")

    def attach(self, substrate: str, alias: str) -> str:
        """Attach (once) and return the alias the substrate has in this connection."""
        substrate = canonical_substrate(substrate)
        if substrate in self.aliases:
            return self.aliases[substrate]
        if self.is_embedded(substrate) and not self.locked:
            self.lock.__enter__()
            self.locked = True
        self.conn.execute(self.attach_sql(substrate, alias))
        self.aliases[substrate] = alias
        return alias

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
        if u.kind == "datatable":
            schema, table = (u.path[0], u.path[1]) if len(u.path) == 2 else ("public", u.path[-1])
            return f"{_ident(alias)}.{_ident(schema)}.{_ident(table)}"
        schema, _, table = u.table.rpartition(".")
        return f"{_ident(alias)}.{_ident(schema or 'main')}.{_ident(table)}"

    def configure_s3(self) -> None:
        """Point DuckDB's httpfs at the configured endpoint (once per connection)."""
        if self._s3_ready:
            return
        s = self.settings
        self.conn.execute("LOAD httpfs")
        parts = ["TYPE s3"]
        if s.s3_access_key_id:
            parts += [f"KEY_ID {_quote_str(s.s3_access_key_id)}", f"SECRET {_quote_str(s.s3_secret_access_key or '')}"]
        if s.s3_region:
            parts.append(f"REGION {_quote_str(s.s3_region)}")
        if s.s3_endpoint_url:
            endpoint = s.s3_endpoint_url
            use_ssl = endpoint.startswith("https://")
            endpoint = endpoint.split("://", 1)[-1].rstrip("/")
            parts += [f"ENDPOINT {_quote_str(endpoint)}", "URL_STYLE 'path'", f"USE_SSL {'true' if use_ssl else 'false'}"]
        self.conn.execute(f"CREATE OR REPLACE SECRET lineage_s3 ({', '.join(parts)})")
        self._s3_ready = True

    def object_path(self, uri: str) -> str:
        """Where an s3:// object is, ready for read_parquet/COPY in this connection."""
        loc = self.settings.object_location(uri)
        if loc.startswith("s3://"):
            self.configure_s3()
        else:
            Path(loc).parent.mkdir(parents=True, exist_ok=True)
        return loc

    def snapshot_id(self, alias: str) -> int | None:
        """The DuckLake snapshot id of a lake alias, None for other catalogs."""
        if not any(a == alias and s.startswith("ducklake://") for s, a in self.aliases.items()):
            return None
        row = self.conn.execute(f"SELECT id FROM ducklake_current_snapshot({_quote_str(alias)})").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def execute(self, sql: str, params: dict[str, Any] | None = None, where: Location | None = None) -> Any:
        try:
            return self.conn.execute(sql, params or None)
        except Exception as e:  # duckdb.Error has many subclasses; keep the message and say where
            if where is None:
                raise
            raise RunError(f"statement failed: {e}", where, "fix the statement shown above") from e


def canonical_substrate(text: str) -> str:
    """``ducklake`` → ``ducklake://main``; ``duckdb:///`` → ``duckdb://warehouse``."""
    kind, sep, rest = text.partition("://")
    name = rest.strip("/") if sep else ""
    if not name:
        name = uris.DEFAULT_AUTHORITY.get(kind, "")
    return f"{kind}://{name}"
