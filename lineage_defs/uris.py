"""Asset URIs (``kind://path``) and their one-to-one mapping to asset key paths.

Pure: knows nothing of Dagster. ``AssetKey(list(key_path(uri)))`` is the key.

>>> normalize("ducklake:///orders")
'ducklake://main/orders'
>>> key_path("s3:///raw/orders/{partition}.csv")
('s3', '_default', 'raw', 'orders', 'PARTITION-orders.csv')
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from enum import StrEnum

from lineage_defs.errors import did_you_mean


class Kind(StrEnum):
    """What a URI names (``kind://``): a string enum, so ``Kind.S3 == "s3"``."""

    DUCKLAKE = "ducklake"  # a DuckLake table (``ducklake://main/t``: the embedded lake)
    DUCKDB = "duckdb"  # a DuckDB table (``duckdb://warehouse/t``: the embedded warehouse)
    DATATABLE = "datatable"  # a PostgreSQL table (``datatable://<connection>/<schema>/<t>``)
    S3 = "s3"  # an object (``s3:///path``: the default storage)
    DBT = "dbt"  # a dbt model's relation (``dbt://<database>/<schema>/<name>``)

    @property
    def is_table(self) -> bool:
        """A table scripts write and read (the lineage I/O manager loads it); not an object or a dbt model."""
        return self in TABLE_KINDS

    @property
    def dagster_kind(self) -> str:
        """The Dagster kind tag of the substrate (``datatable://`` is PostgreSQL)."""
        return "postgres" if self is Kind.DATATABLE else self.value


KINDS = tuple(k.value for k in Kind)
TABLE_KINDS = frozenset({Kind.DUCKLAKE, Kind.DUCKDB, Kind.DATATABLE})
DEFAULT_AUTHORITY = {Kind.DUCKLAKE.value: "main", Kind.DUCKDB.value: "warehouse"}
# The embedded default stores, by the catalog alias SQL, scripts and dbt-duckdb's default profile name them with.
DEFAULT_CATALOGS = {"lake": f"ducklake://{DEFAULT_AUTHORITY['ducklake']}", "warehouse": f"duckdb://{DEFAULT_AUTHORITY['duckdb']}"}
# S3 bucket names cannot hold '_', so this never collides with a real bucket.
DEFAULT_BUCKET = "_default"
PARTITION_TOKEN = "{partition}"
# Dagster derives op input/output names from key parts, which allows only
# [A-Za-z0-9_.-]; inside keys the partition token is spelled
# PARTITION-<the key part before>. Upper case reads as a placeholder, like the
# braces it stands for; only that exact spelling is reserved in URIs, so names
# such as PARTITION_LOG stay legal.
KEY_PARTITION_TOKEN = "PARTITION"
_SAFE_PART = re.compile(r"[A-Za-z0-9_.\-]+")  # fullmatch: `$` would match before a final newline


class UriError(ValueError):
    """A malformed URI; ``fix`` says how to write it."""

    def __init__(self, message: str, fix: str | None = None, offset: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.offset = offset


@dataclass(frozen=True)
class Uri:
    kind: Kind
    authority: str  # lake, database, connection name, bucket ("" = default storage) or dbt warehouse
    path: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.kind}://{self.authority}/{'/'.join(self.path)}"

    @property
    def table(self) -> str:
        return self.path[-1]

    def key_path(self) -> tuple[str, ...]:
        """The asset key's parts. ``{partition}`` is spelled ``PARTITION-<the key part before>``:
        ``raw/orders/{partition}.csv`` → ``…, "orders", "PARTITION-orders.csv"``. The UI labels a node
        with the key's last part, and shortens long names in the middle: ``PARTITION.csv`` would name
        every daily drop alike, and so would a name ending in it. One-to-one: :func:`parse` refuses a
        URI whose own text holds the spelling its place would get (``raw/PARTITION-raw.csv``), so each
        ``PARTITION-<part before>`` reads back as ``{partition}``.
        """
        out: list[str] = [self.kind.value]  # plain strings: they become AssetKey parts
        for part in (self.authority or DEFAULT_BUCKET, *self.path):
            out.append(part.replace(PARTITION_TOKEN, _spelled(out[-1])))
        return tuple(out)

    @property
    def is_parquet(self) -> bool:
        return self.kind == Kind.S3 and self.path[-1].endswith(".parquet")


@functools.lru_cache(maxsize=65536)
def parse(text: str) -> Uri:
    """Parse and validate an asset URI; raises UriError with a fix (cached: URIs repeat across a graph)."""
    kind, sep, rest = text.partition("://")
    if not sep:
        if text in DEFAULT_AUTHORITY:
            raise UriError(f"'{text}' names a substrate, not a table", f"write {text}://{DEFAULT_AUTHORITY[text]}/<table>")
        raise UriError(f"'{text}' is not an asset URI", "write kind://path, e.g. ducklake://main/orders")
    if kind not in KINDS:
        guess = did_you_mean(kind, KINDS)
        fix = f"did you mean '{guess}://{rest}'?" if guess else f"use one of {', '.join(k + '://' for k in KINDS)}"
        raise UriError(f"unknown URI kind '{kind}'", fix)
    authority, _, path_text = rest.partition("/")
    if not authority and kind != Kind.S3:
        authority = DEFAULT_AUTHORITY.get(kind, "")
        if not authority:
            raise UriError(f"{kind}:// needs a name before the path", f"write {kind}://<name>/<table>")
    parts = tuple(path_text.split("/")) if path_text else ()
    if not parts or any(p == "" for p in parts):
        example = {
            Kind.DUCKLAKE: "ducklake://main/orders",
            Kind.DUCKDB: "duckdb://warehouse/orders",
            Kind.DATATABLE: "datatable://crm/customers",
            Kind.S3: "s3:///raw/orders.parquet",
            Kind.DBT: "dbt://warehouse/main/orders",
        }[Kind(kind)]
        raise UriError(f"'{text}' has no table or object path", f"write e.g. {example}", offset=len(text))
    if kind == Kind.DBT and len(parts) != 2:
        raise UriError(f"'{text}' must be dbt://<warehouse>/<schema>/<name>", "write e.g. dbt://warehouse/main/orders")
    if kind in (Kind.DUCKLAKE, Kind.DUCKDB) and len(parts) != 1:
        raise UriError(f"'{text}' must name exactly one table", f"write {kind}://{authority}/<table>")
    if any(c.isspace() for c in text):
        raise UriError(f"'{text}' contains whitespace", "quote nothing inside a URI; remove the spaces")
    for part in (authority, *parts):
        if part in (".", ".."):
            raise UriError(f"'{text}' contains a '{part}' path segment", "write the object's path without '.' or '..' segments")
        rest = part.replace(PARTITION_TOKEN, "")
        if rest and not _SAFE_PART.fullmatch(rest):
            bad = next(c for c in rest if not _SAFE_PART.fullmatch(c))
            raise UriError(f"'{text}' contains '{bad}'", "asset URIs may use letters, digits, '_', '.', '-', '/' and the {partition} token")
    uri = Uri(Kind(kind), authority, parts)
    keys = uri.key_path()
    for prev, key, part in zip(keys, keys[1:], (authority or DEFAULT_BUCKET, *parts)):
        if key.replace(_spelled(prev), PARTITION_TOKEN) != part:
            raise UriError(f"'{_spelled(prev)}' is reserved in '{text}': asset keys spell {PARTITION_TOKEN} after '{prev}' with it",
                           f"write {PARTITION_TOKEN} for the partition, or another name")
    return uri


def _spelled(prev_key_part: str) -> str:
    """How ``{partition}`` reads in an asset key part that follows ``prev_key_part``."""
    return f"{KEY_PARTITION_TOKEN}-{prev_key_part}"


def normalize(text: str) -> str:
    return str(parse(text))


def key_path(text: str) -> tuple[str, ...]:
    return parse(text).key_path()


def kind_of(text: str) -> Kind | None:
    """The kind a URI's text names (without parsing the rest), or None for no known kind."""
    kind = text.partition("://")[0]
    return Kind(kind) if kind in _KIND_VALUES else None


_KIND_VALUES = frozenset(KINDS)


def is_table(text: str) -> bool:
    """Whether the URI names a table scripts write and read (``Kind.is_table``)."""
    kind = kind_of(text)
    return kind is not None and kind.is_table


def table_name(text: str) -> str | None:
    """How SQL steps name the URI's table (``dagster/table_name``): ``lake.main.t``, ``warehouse.main.t``, ``crm.public.t``."""
    kind, _, rest = text.partition("://")
    auth, _, path = rest.partition("/")
    if kind == Kind.DUCKLAKE and auth == "main":
        return f"lake.main.{path}"
    if kind == Kind.DUCKDB and auth == "warehouse":
        return f"warehouse.main.{path}"
    if kind == Kind.DATATABLE:
        return f"{auth}.{path.replace('/', '.')}"
    return None
