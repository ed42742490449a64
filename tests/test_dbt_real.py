"""dbt projects as people write them (``REAL_FILES``), built through Dagster: "Materialize all" succeeds
in one go, twice in a row; every model's and seed's columns carry their real types and every edge its
kind, read back from the Dagster instance; sources that are a seed's or another project's model are
that one asset; a project's own DuckDB target is read by a script under its database name.

One module fixture builds everything (dbt invocations take seconds); the tests read the instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import AssetCheckKey, AssetKey, DagsterInstance, Definitions

from dbt_projects import REAL_FILES, write_files
from lineage_defs import LineageSettings, build_definitions
from lineage_defs.project import load_project
from lineage_defs.plan.spec import DbtStep, Project
from lineage_defs.run.substrates import Session

pytestmark = pytest.mark.dbt

W = "dbt://warehouse/main/"


def key(uri: str) -> AssetKey:
    kind, rest = uri.split("://", 1)
    return AssetKey([kind, *rest.split("/")])


@dataclass
class Built:
    pipelines: Path
    state: Path
    plan: Project
    defs: Definitions
    instance: DagsterInstance
    runs: list[Any]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("dbt-real")
    pipelines, state = write_files(root / "pipelines", REAL_FILES), root / "state"
    settings = LineageSettings(state_dir=str(state))
    plan = load_project(pipelines, settings)
    defs = build_definitions(pipelines, settings=settings)
    instance = DagsterInstance.ephemeral()
    graph = defs.resolve_asset_graph()
    everything = [k for k in graph.get_all_asset_keys() if graph.get(k).is_executable]
    job = defs.resolve_implicit_job_def_def_for_assets(everything)
    assert job is not None
    # "Materialize all", twice: the second build finds every relation there (dbt then reorders nothing for us)
    runs = [job.execute_in_process(instance=instance, asset_selection=everything, raise_on_error=False) for _ in range(2)]
    return Built(pipelines, state, plan, defs, instance, runs)


def _meta(b: Built, uri: str) -> dict[str, Any]:
    ev = b.instance.get_latest_materialization_event(key(uri))
    assert ev is not None and ev.asset_materialization is not None, f"{uri} was not materialized"
    return dict(ev.asset_materialization.metadata)


def test_materialize_all_succeeds_twice_in_a_row(built: Built) -> None:
    assert not built.plan.errors, [e.render() for e in built.plan.errors]
    for i, r in enumerate(built.runs):
        failures = [e.event_specific_data.error.to_string() for e in r.all_events if e.event_type_value == "STEP_FAILURE"]
        assert r.success, f"build {i + 1}: {failures}"
        materialized = {e.asset_key for e in r.get_asset_materialization_events()}
        assert {key(u) for u in TYPES} | {key(f"ducklake://main/{t}") for t in ("orders", "gold_accounts", "account_tiers")} <= materialized


def test_the_seed_builds_before_the_model_reading_it_as_a_source(built: Built) -> None:
    for r in built.runs:
        order = [e.asset_key for e in r.get_asset_materialization_events()]
        assert order.index(key(W + "raw_customers")) < order.index(key(W + "stg_customers"))
        commands = [e.user_message for e in built.instance.all_logs(r.run_id) if e.user_message.startswith("dbt build")]
        shop = [c for c in commands if "shop_dbt." in c]
        # dbt cannot see the source → seed edge: two waves, the seed first, its reader and the test on the source after it
        assert len(shop) == 2, shop
        assert "fqn:shop_dbt.raw_customers " in shop[0] and "stg_customers" not in shop[0] and "source_not_null" not in shop[0], shop
        assert "fqn:shop_dbt.staging.stg_customer_names " in shop[0], shop  # its ref() to the seed dbt sees: the seed's wave
        assert order.index(key(W + "raw_customers")) < order.index(key(W + "stg_customer_names"))
        assert "fqn:shop_dbt.staging.stg_customers " in shop[1] and "fqn:shop_dbt.source_not_null_crm_raw_customers_id " in shop[1], shop


def test_sources_are_the_assets_their_relations_are(built: Built) -> None:
    graph = built.defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert not [k for k in keys if k.startswith("duckdb/")]  # no second node for a seed's or a model's relation
    assert graph.get(key(W + "stg_customers")).parent_keys == {key(W + "raw_customers")}  # the seed, read through source()
    assert graph.get(key(W + "stg_customer_names")).parent_keys == {key(W + "raw_customers")}  # the same seed, through ref()
    assert {key(W + "stg_customers"), key(W + "stg_customer_names")} <= graph.get(key(W + "raw_customers")).child_keys
    assert graph.get(key(W + "top_customers")).parent_keys == {key(W + "customers")}  # the other project's model
    assert graph.get(key("ducklake://main/gold_accounts")).parent_keys == {key("dbt://crm/main/accounts")}  # crm.main.accounts
    on_sources = {
        AssetCheckKey(key(W + "raw_customers"), "source_not_null_crm_raw_customers_id"),
        AssetCheckKey(key(W + "customers"), "source_not_null_shop_customers_customer_id"),
    }
    assert on_sources <= set(graph.asset_check_keys)
    for r in built.runs:
        evaluated = {
            AssetCheckKey(e.event_specific_data.asset_key, e.event_specific_data.check_name): e.event_specific_data.passed
            for e in r.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION"
        }
        assert {k: evaluated.get(k) for k in on_sources} == dict.fromkeys(on_sources, True)
        assert evaluated.get(AssetCheckKey(key(W + "stg_orders"), "unique_stg_orders_order_id")) is True


TYPES: dict[str, list[tuple[str, str]]] = {
    W + "raw_customers": [("id", "INTEGER"), ("first_name", "VARCHAR"), ("last_name", "VARCHAR")],
    W + "raw_payments": [("id", "INTEGER"), ("order_id", "INTEGER"), ("payment_method", "VARCHAR"), ("amount", "INTEGER")],
    W + "stg_customers": [("customer_id", "INTEGER"), ("first_name", "VARCHAR"), ("last_name", "VARCHAR")],
    W + "stg_customer_names": [("customer_id", "INTEGER"), ("full_name", "VARCHAR")],
    W + "stg_payments": [("payment_id", "INTEGER"), ("order_id", "INTEGER"), ("payment_method", "VARCHAR"), ("amount", "DECIMAL(18,2)")],
    # schema.yml declares two of these seven columns
    W + "stg_orders": [
        ("order_id", "BIGINT"), ("customer_id", "BIGINT"), ("order_ts", "TIMESTAMP"), ("order_date", "DATE"),
        ("order_month", "DATE"), ("amount", "DECIMAL(18,2)"), ("status", "VARCHAR"),
    ],
    W + "customer_orders": [
        ("order_id", "BIGINT"), ("customer_id", "BIGINT"), ("order_ts", "TIMESTAMP"), ("order_date", "DATE"), ("order_month", "DATE"),
        ("amount", "DECIMAL(18,2)"), ("status", "VARCHAR"), ("paid", "DECIMAL(38,2)"), ("order_seq", "BIGINT"), ("running_amount", "DECIMAL(38,2)"),
    ],
    W + "order_events": [
        ("order_id", "BIGINT"), ("customer_id", "BIGINT"), ("order_ts", "TIMESTAMP"), ("order_date", "DATE"),
        ("order_month", "DATE"), ("amount", "DECIMAL(18,2)"), ("status", "VARCHAR"), ("event", "VARCHAR"),
    ],
    W + "customers": [
        ("customer_id", "INTEGER"), ("first_name", "VARCHAR"), ("last_name", "VARCHAR"), ("orders", "BIGINT"),
        ("lifetime_value", "DECIMAL(38,2)"), ("last_order", "DATE"),
    ],
    W + "top_customers": [
        ("customer_id", "INTEGER"), ("first_name", "VARCHAR"), ("last_name", "VARCHAR"), ("orders", "BIGINT"),
        ("lifetime_value", "DECIMAL(38,2)"), ("last_order", "DATE"),
    ],
    "dbt://crm/main/accounts_raw": [("account_id", "INTEGER"), ("name", "VARCHAR"), ("tier", "VARCHAR")],
    "dbt://crm/main/accounts": [("account_id", "INTEGER"), ("name", "VARCHAR"), ("is_gold", "BOOLEAN")],
}  # fmt: skip


def test_every_model_and_seed_column_has_its_real_type(built: Built) -> None:
    for uri, expected in TYPES.items():
        columns = _meta(built, uri)["dagster/column_schema"].value.columns
        assert [(c.name, c.type) for c in columns] == expected, uri


O, P, CO, C = W + "stg_orders.", W + "stg_payments.", W + "customer_orders.", W + "customers."
EDGES: dict[str, set[tuple[str, str, str]]] = {
    W + "stg_customers": {
        (W + "raw_customers.id", "customer_id", "copy"), (W + "raw_customers.first_name", "first_name", "copy"),
        (W + "raw_customers.last_name", "last_name", "copy"),
    },
    # adapter.dispatch (cents_to_dollars) and dbt.date_trunc, `select *` through two CTEs
    W + "stg_orders": {
        ("ducklake://main/orders.order_id", "order_id", "copy"), ("ducklake://main/orders.customer_id", "customer_id", "copy"),
        ("ducklake://main/orders.order_ts", "order_ts", "copy"), ("ducklake://main/orders.order_ts", "order_date", "mod"),
        ("ducklake://main/orders.order_ts", "order_month", "mod"), ("ducklake://main/orders.amount_cents", "amount", "mod"),
        ("ducklake://main/orders.status", "status", "copy"),
    },
    W + "stg_customer_names": {
        (W + "raw_customers.id", "customer_id", "copy"), (W + "raw_customers.first_name", "full_name", "mod"),
        (W + "raw_customers.last_name", "full_name", "mod"),
    },
    W + "stg_payments": {
        (W + "raw_payments.id", "payment_id", "copy"), (W + "raw_payments.order_id", "order_id", "copy"),
        (W + "raw_payments.payment_method", "payment_method", "copy"), (W + "raw_payments.amount", "amount", "mod"),
    },
    # `*` over the ephemeral int_orders_paid (`orders.*` over a CTE of stg_orders' real columns), windows
    W + "customer_orders": {
        *((O + c, c, "copy") for c in ("order_id", "customer_id", "order_ts", "order_date", "order_month", "amount", "status")),
        (P + "amount", "paid", "mod"),
        (O + "customer_id", "order_seq", "mod"), (O + "order_ts", "order_seq", "mod"),
        (O + "customer_id", "running_amount", "mod"), (O + "order_ts", "running_amount", "mod"), (O + "amount", "running_amount", "mod"),
        (O + "order_id", "", "scan"), (P + "order_id", "", "scan"),
    },
    # `select *` over two CTEs of stg_orders (its seven real columns, schema.yml names two), unioned
    W + "order_events": {
        *((O + c, c, "copy") for c in ("order_id", "customer_id", "order_ts", "order_date", "order_month", "amount", "status")),
        (O + "status", "", "scan"),
    },
    W + "customers": {
        (W + "stg_customers.customer_id", "customer_id", "copy"), (W + "stg_customers.first_name", "first_name", "copy"),
        (W + "stg_customers.last_name", "last_name", "copy"), (CO + "amount", "lifetime_value", "mod"), (CO + "order_date", "last_order", "mod"),
        (W + "stg_customers.customer_id", "", "scan"), (CO + "customer_id", "", "scan"),
    },
    # the other project's source IS this model: its columns come from the built relation
    W + "top_customers": {
        *((C + c, c, "copy") for c in ("customer_id", "first_name", "last_name", "orders", "lifetime_value", "last_order")),
        (C + "lifetime_value", "", "scan"),
    },
    "dbt://crm/main/accounts": {
        ("dbt://crm/main/accounts_raw.account_id", "account_id", "copy"), ("dbt://crm/main/accounts_raw.name", "name", "mod"),
        ("dbt://crm/main/accounts_raw.tier", "is_gold", "mod"),
    },
    # a script reading the crm project's own DuckDB file by its database name
    "ducklake://main/gold_accounts": {
        ("dbt://crm/main/accounts.account_id", "account_id", "copy"), ("dbt://crm/main/accounts.name", "name", "copy"),
        ("dbt://crm/main/accounts.is_gold", "", "scan"),
    },
}  # fmt: skip


def _edges(meta: dict[str, Any], uri: str) -> set[tuple[str, str, str]]:
    out = set()
    for e in meta["lineage/column_edges"].value:
        target = e["to"][len(uri) + 1 :] if e["to"] != uri else ""
        out.add((e["from"], target, e["kind"]))
    return out


def test_every_edge_with_its_kind(built: Built) -> None:
    for uri, expected in EDGES.items():
        assert _edges(_meta(built, uri), uri) == expected, uri
    # the copy and mod edges are Dagster's column lineage too, across the script/dbt boundary
    deps = _meta(built, "ducklake://main/gold_accounts")["dagster/column_lineage"].value.deps_by_column
    assert [(d.asset_key, d.column_name) for d in deps["account_id"]] == [(key("dbt://crm/main/accounts"), "account_id")]


def test_load_time_lineage_renders_macros_and_inlines_ephemerals(built: Built) -> None:
    steps = {s.uri: s for s in built.plan.steps if isinstance(s, DbtStep)}
    for uri in (W + "stg_orders", W + "stg_payments", W + "customer_orders", W + "order_events"):  # macros; macros; an ephemeral ref; `*` of a `*`
        got = {(e.source, e.target[len(uri) + 1 :] if e.target != uri else "", e.kind) for e in steps[uri].column_edges}
        assert got == EDGES[uri], uri
    assert steps[W + "stg_orders"].output_columns == tuple(c for c, _ in TYPES[W + "stg_orders"])  # not schema.yml's two


def test_a_script_reads_the_projects_own_duckdb_target(built: Built) -> None:
    meta = _meta(built, "ducklake://main/gold_accounts")
    assert meta["dagster/row_count"].value == 2
    with Session(LineageSettings(state_dir=str(built.state))) as s:
        assert s.conn.execute("SELECT account_id, name FROM lake.main.gold_accounts ORDER BY 1").fetchall() == [(1, "ACME"), (3, "INITECH")]
    assert (built.pipelines / "crm" / "dbt" / "crm.duckdb").exists()  # where the project's profiles.yml puts it
    # a Python step naming the model's URI gets the same database in runtime.connect()
    graph = built.defs.resolve_asset_graph()
    assert graph.get(key("ducklake://main/account_tiers")).parent_keys == {key("dbt://crm/main/accounts")}
    with Session(LineageSettings(state_dir=str(built.state))) as s:
        assert s.conn.execute("SELECT is_gold, accounts FROM lake.main.account_tiers ORDER BY 1").fetchall() == [(False, 1), (True, 2)]


def test_a_target_scripts_cannot_reach_is_a_located_error(tmp_path: Path) -> None:
    files = {
        "rep/dbt/dbt_project.yml": "name: remote_dbt\nversion: '1.0'\nprofile: remote_dbt\n",
        "rep/dbt/profiles.yml": "remote_dbt:\n  target: prod\n  outputs:\n    prod:\n      type: duckdb\n      path: 'md:analytics'\n",
        "rep/dbt/models/accounts.sql": "select 1 as id\n",
        "rep/copy.sql": "-- pipeline\n-- materialize ducklake://main/copy\nSELECT id\nFROM analytics.main.accounts\n",
    }
    plan = load_project(write_files(tmp_path / "pipelines", files), LineageSettings(state_dir=str(tmp_path / "state")))
    (error,) = plan.errors
    assert str(error.location) == "rep/copy.sql:4:6" and "dbt://analytics/main/accounts" in error.message and "MotherDuck" in error.message
    assert error.fix and "rep/dbt/profiles.yml" in error.fix
