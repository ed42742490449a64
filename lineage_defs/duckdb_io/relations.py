"""Which relation an asset is: key and metadata → asset URI → the table's SQL name in a session. No Dagster.

Our own assets carry their URI as ``lineage/uri`` metadata. A hand-written
asset is found by its key read the way ``LineageTranslator`` writes keys
(``["ducklake", "main", "orders_summary"]`` → ``ducklake://main/orders_summary``),
or by ``lineage/uri`` metadata of its own when its key says something else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lineage_defs import uris
from lineage_defs.dbt.relations import DEFAULT_CATALOGS, table_uri
from lineage_defs.errors import RunError
from lineage_defs.run.quoting import ident
from lineage_defs.run.substrates import Session

URI_METADATA = "lineage/uri"


def _plain(value: Any) -> Any:
    """A metadata entry's value (definition metadata holds raw values or ``MetadataValue``s)."""
    return getattr(value, "value", value)


def uri_of(key_path: Sequence[str], metadata: Mapping[str, Any]) -> str:
    """The asset URI of an asset, from its ``lineage/uri`` metadata or else its key.

    >>> uri_of(["ducklake", "main", "orders_summary"], {})
    'ducklake://main/orders_summary'
    """
    given = _plain(metadata.get(URI_METADATA))
    if isinstance(given, str) and given:
        try:
            return uris.normalize(given)
        except uris.UriError as e:
            raise RunError(f"'{URI_METADATA}' metadata '{given}': {e.message}", fix=e.fix) from None
    path = list(key_path)
    if len(path) >= 3 and path[0] in uris.KINDS:
        candidate = f"{path[0]}://{path[1]}/{'/'.join(path[2:])}"
        try:
            if list(uris.key_path(candidate)) == path:
                return uris.normalize(candidate)
        except uris.UriError:
            pass
    shown = "/".join(path)
    raise RunError(
        f"asset '{shown}' does not name a table lineage_defs knows",
        fix=f"key the asset as ducklake/main/<table> or duckdb/warehouse/<table>, or give it metadata {{'{URI_METADATA}': 'ducklake://main/<table>'}}",
    )


def table_uri_of(uri: str) -> str:
    """The table URI a session attaches for an asset: a default-profile dbt model is a warehouse (or lake) table."""
    u = uris.parse(uri)
    if u.kind is uris.Kind.DBT:
        substrate = DEFAULT_CATALOGS.get(u.authority)
        if substrate is None:
            raise RunError(
                f"{uri} lives in a dbt profile of its own, which lineage_defs does not attach",
                fix="read it with the dbt project's own connection (the I/O manager reads dbt models on the embedded default)",
            )
        return table_uri(substrate, u.path[0], u.path[1])
    if not u.kind.is_table:
        raise RunError(
            f"{uri} is an object, not a table: the I/O manager reads and writes tables",
            fix="depend on it with deps=[...] and read the file yourself (lineage_defs.runtime.path gives its location)",
        )
    return uri


def relation(session: Session, uri: str) -> tuple[str, str]:
    """(schema, table) SQL of the asset's table in ``session`` — ``'"lake"."main"', '"orders"'`` — attaching its catalog."""
    table = table_uri_of(uri)
    qualified = session.table_sql(table)  # "alias"."schema"."table"
    u = uris.parse(table)
    name = u.path[-1] if u.kind is uris.Kind.DATATABLE else u.table.rpartition(".")[2]
    return qualified[: -len(ident(name)) - 1], ident(name)
