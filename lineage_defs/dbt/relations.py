"""dbt relations ↔ asset URIs. Pure.

A model, seed or snapshot is the asset ``dbt://<database>/<schema>/<alias>``.
On the embedded default (no ``profiles.yml``) its relation lives in a catalog
scripts attach too (``warehouse``, ``lake``), so a script's SQL names it by
another URI (``warehouse.main.store_daily`` → ``duckdb://warehouse/store_daily``),
which ``script_uri`` gives so the graph keeps one node; a source whose relation
is a script's table IS that script's asset (``lake.main.orders`` →
``ducklake://main/orders``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lineage_defs import uris

# dbt-duckdb's default profile names the warehouse file `warehouse` and attaches the main lake as `lake`.
DEFAULT_CATALOGS = uris.DEFAULT_CATALOGS
ASSET_TYPES = ("model", "seed", "snapshot")


def is_asset(node: Mapping[str, Any]) -> bool:
    """Enabled and not ephemeral (an ephemeral model is inlined into its readers)."""
    cfg = node.get("config") or {}
    return cfg.get("materialized") != "ephemeral" and cfg.get("enabled", True) is not False


def relation_of(node: Mapping[str, Any]) -> str:
    """``database.schema.alias`` of a model, seed or snapshot."""
    return f"{node['database']}.{node['schema']}.{node.get('alias') or node['name']}"


def model_uri(node: Mapping[str, Any]) -> str:
    """``dbt://<database>/<schema>/<alias>`` of a model, seed or snapshot."""
    return uris.normalize(f"dbt://{node['database']}/{node['schema']}/{node.get('alias') or node['name']}")


def table_uri(substrate: str, schema: str, name: str) -> str:
    """The URI sqlglot analysis gives ``<catalog>.<schema>.<name>`` on a substrate."""
    return uris.normalize(f"{substrate}/{name if schema == 'main' else f'{schema}.{name}'}")


def source_uri(source: Mapping[str, Any], default_profile: bool) -> str:
    """A source's asset: the script asset holding its relation on the embedded default, else ``dbt://…``."""
    db, schema, ident = source["database"], source["schema"], source.get("identifier") or source["name"]
    if default_profile and db in DEFAULT_CATALOGS:
        return table_uri(DEFAULT_CATALOGS[db], schema, ident)
    return uris.normalize(f"dbt://{db}/{schema}/{ident}")


def script_uri(relation: str, default_profile: bool) -> str | None:
    """The URI a script's SQL names when it reads this relation (embedded default only)."""
    database, schema, name = relation.split(".", 2)
    if default_profile and database in DEFAULT_CATALOGS:
        return table_uri(DEFAULT_CATALOGS[database], schema, name)
    return None


def node_relation(node: Mapping[str, Any]) -> str:
    """``database.schema.name`` of any manifest node: a model, seed or snapshot (its alias) or a source (its identifier)."""
    return f"{node.get('database')}.{node.get('schema')}.{node.get('alias') or node.get('identifier') or node.get('name')}"


def analysis_uri(relation: str, default_profile: bool) -> str | None:
    """The URI the SQL analysis gives ``database.schema.name`` in compiled SQL (a project's own databases declared by ``own_catalogs``' prelude)."""
    database, schema, name = relation.split(".", 2)
    if default_profile:
        return script_uri(relation, True)
    return table_uri(f"duckdb://{database}", schema, name)


def own_catalogs(node_uris: Iterable[tuple[str, str]], default_profile: bool) -> tuple[str, dict[str, str]]:
    """For a project on its own profile: SQL declaring its databases, and their relations → assets.

    The analysis knows the embedded catalogs (``lake``, ``warehouse``); a
    project's own database (``own.main.base``) is declared to it with an
    ``ATTACH`` prelude, and the URI the analysis then gives
    (``duckdb://own/base``) maps back to the node (``dbt://own/main/base``).
    Only for the project's own lineage: scripts keep their meaning of ``duckdb://``.
    """
    if default_profile:
        return "", {}
    databases: set[str] = set()
    aliases: dict[str, str] = {}
    for _, uri in node_uris:
        u = uris.parse(uri)
        if u.kind == uris.Kind.DBT:
            databases.add(u.authority)
            aliases[table_uri(f"duckdb://{u.authority}", u.path[0], u.path[1])] = uri
    prelude = "".join(f"ATTACH 'duckdb://{db}' AS \"{db}\";\n" for db in sorted(databases))
    return prelude, aliases
