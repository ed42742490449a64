"""Real dbt-duckdb projects for the tests, written into a pipelines folder beside scripts."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

SHOP_FILES = {
    # scripts: an orders table in the lake, and a report reading the dbt mart's relation
    "shop/orders.sql": """
        -- pipeline
        -- materialize ducklake://main/orders
        SELECT i AS order_id, i % 7 AS customer_id, CAST(i AS DOUBLE) * 2.5 AS amount,
               TIMESTAMP '2025-01-01 00:00:00' + to_hours(CAST(i * 8 AS INTEGER)) AS order_ts
        FROM range(15) t(i)
    """,
    "shop/report.sql": """
        -- pipeline
        -- materialize ducklake://main/report
        SELECT order_date, revenue * 2 AS doubled_revenue FROM warehouse.main.store_daily
    """,
    # the dbt project: no profiles.yml, so it runs on the embedded default
    "shop/dbt/dbt_project.yml": """
        name: shop_dbt
        version: "1.0"
        profile: shop_dbt
    """,
    "shop/dbt/lineage.yml": """
        exclude: legacy
        vars: {min_amount: 5}
        threads: 2
    """,
    "shop/dbt/models/sources.yml": """
        version: 2
        sources:
          - name: lake
            database: lake
            schema: main
            tables:
              - name: orders
                config:
                  event_time: order_ts
                columns:
                  - name: order_id
                    data_tests: [not_null, unique]
    """,
    "shop/dbt/models/stg_orders.sql": """
        select order_id, customer_id, amount as amount_eur, cast(order_ts as date) as order_date
        from {{ source('lake', 'orders') }}
        where amount >= {{ var('min_amount') }}
    """,
    "shop/dbt/models/store_daily.sql": """
        select order_date, sum(amount_eur) as revenue, count(*) as order_count
        from {{ ref('stg_orders') }}
        group by order_date
    """,
    "shop/dbt/models/orders_daily.sql": """
        {{ config(materialized='incremental', incremental_strategy='microbatch', event_time='order_ts',
                  batch_size='day', begin='2025-01-01') }}
        select order_id, order_ts, amount from {{ source('lake', 'orders') }}
    """,
    "shop/dbt/models/legacy.sql": """
        select 1 as id
    """,
    "shop/dbt/models/schema.yml": """
        version: 2
        models:
          - name: store_daily
            columns:
              - name: order_date
                data_tests: [unique, not_null]
          - name: stg_orders
            columns:
              - name: order_id
                data_tests: [not_null]
    """,
}


# Three dbt-duckdb projects as people write them, beside scripts: macros through adapter.dispatch
# and dbt.date_trunc, a schema.yml declaring a subset of columns with `select *` through CTEs and a union, an
# ephemeral model in a chain, window functions, a seed read both by ref() and as a source (with a
# source test), a second project whose source is the first one's model, and a project with its own
# profiles.yml (a DuckDB file target) whose model a script reads by its database name.
REAL_FILES = {
    # --- shop: a script's orders table, a dbt project on the embedded default ---
    "shop/orders.sql": """
        -- pipeline
        -- materialize ducklake://main/orders
        SELECT i AS order_id, i % 4 AS customer_id, TIMESTAMP '2025-01-01 00:00:00' + to_hours(CAST(i * 20 AS INTEGER)) AS order_ts,
               CAST(i * 250 AS BIGINT) AS amount_cents, CASE WHEN i % 5 = 0 THEN 'returned' ELSE 'placed' END AS status
        FROM range(1, 13) t(i)
    """,
    "shop/dbt/dbt_project.yml": """
        name: shop_dbt
        version: "1.0"
        profile: shop_dbt
        models:
          shop_dbt:
            intermediate:
              +materialized: ephemeral
            marts:
              +materialized: table
    """,
    "shop/dbt/seeds/raw_customers.csv": "id,first_name,last_name\n0,Ada,Lovelace\n1,Alan,Turing\n2,Grace,Hopper\n3,Edsger,Dijkstra\n",
    "shop/dbt/seeds/raw_payments.csv": "id,order_id,payment_method,amount\n1,1,card,250\n2,2,card,500\n3,3,coupon,750\n4,4,card,1000\n5,6,bank,1500\n",
    "shop/dbt/macros/cents_to_dollars.sql": """
        {% macro cents_to_dollars(column_name, scale=2) -%}
            {{ return(adapter.dispatch('cents_to_dollars')(column_name, scale)) }}
        {%- endmacro %}
        {% macro default__cents_to_dollars(column_name, scale) -%}
            ({{ column_name }} / 100)::numeric(16, {{ scale }})
        {%- endmacro %}
        {% macro duckdb__cents_to_dollars(column_name, scale) -%}
            ({{ column_name }} / 100)::decimal(18, {{ scale }})
        {%- endmacro %}
    """,
    "shop/dbt/models/sources.yml": """
        version: 2
        sources:
          - name: lake
            database: lake
            schema: main
            tables:
              - name: orders
          - name: crm
            description: the customers seed, read as a source
            database: warehouse
            schema: main
            tables:
              - name: raw_customers
                columns:
                  - name: id
                    data_tests: [not_null]
    """,
    "shop/dbt/models/staging/stg_customers.sql": """
        select id as customer_id, first_name, last_name from {{ source('crm', 'raw_customers') }}
    """,
    # the same seed read through ref(): one asset, both readers after it
    "shop/dbt/models/staging/stg_customer_names.sql": """
        select id as customer_id, first_name || ' ' || last_name as full_name from {{ ref('raw_customers') }}
    """,
    "shop/dbt/models/staging/stg_payments.sql": """
        select id as payment_id, order_id, payment_method, {{ cents_to_dollars('amount') }} as amount
        from {{ ref('raw_payments') }}
    """,
    "shop/dbt/models/staging/stg_orders.sql": """
        with source as (
            select * from {{ source('lake', 'orders') }}
        ),
        renamed as (
            select
                order_id, customer_id, order_ts,
                cast(order_ts as date) as order_date,
                {{ dbt.date_trunc('month', 'order_ts') }} as order_month,
                {{ cents_to_dollars('amount_cents') }} as amount,
                status
            from source
        )
        select * from renamed
    """,
    "shop/dbt/models/staging/schema.yml": """
        version: 2
        models:
          - name: stg_orders
            columns:
              - name: order_id
                data_tests: [unique, not_null]
              - name: customer_id
    """,
    "shop/dbt/models/intermediate/int_orders_paid.sql": """
        with orders as (
            select * from {{ ref('stg_orders') }}
        ),
        payments as (
            select order_id, sum(amount) as paid, count(*) as payment_count
            from {{ ref('stg_payments') }}
            group by order_id
        )
        select orders.*, coalesce(payments.paid, 0) as paid
        from orders
        left join payments on orders.order_id = payments.order_id
    """,
    "shop/dbt/models/marts/customer_orders.sql": """
        select
            *,
            row_number() over (partition by customer_id order by order_ts) as order_seq,
            sum(amount) over (partition by customer_id order by order_ts rows between unbounded preceding and current row) as running_amount
        from {{ ref('int_orders_paid') }}
    """,
    "shop/dbt/models/marts/customers.sql": """
        with c as (select * from {{ ref('stg_customers') }}),
        o as (
            select customer_id, count(*) as orders, sum(amount) as lifetime_value, max(order_date) as last_order
            from {{ ref('customer_orders') }}
            group by customer_id
        )
        select c.*, o.orders, o.lifetime_value, o.last_order
        from c join o on c.customer_id = o.customer_id
    """,
    "shop/dbt/models/marts/order_events.sql": """
        with placed as (
            select * from {{ ref('stg_orders') }}
        ),
        returned as (
            select * from {{ ref('stg_orders') }} where status = 'returned'
        )
        select *, 'placed' as event from placed
        union all
        select *, 'returned' as event from returned
    """,
    "shop/dbt/models/marts/schema.yml": """
        version: 2
        models:
          - name: customers
            columns:
              - name: customer_id
                data_tests: [unique, not_null]
    """,
    # --- reporting: a second dbt project whose source is the first one's model ---
    "reporting/dbt/dbt_project.yml": """
        name: reporting_dbt
        version: "1.0"
        profile: reporting_dbt
    """,
    "reporting/dbt/models/sources.yml": """
        version: 2
        sources:
          - name: shop
            database: warehouse
            schema: main
            tables:
              - name: customers
                columns:
                  - name: customer_id
                    data_tests: [not_null]
    """,
    "reporting/dbt/models/top_customers.sql": """
        select * from {{ source('shop', 'customers') }} where lifetime_value > 5
    """,
    # --- crm: a project with its own profiles.yml (a DuckDB target crm.duckdb), and a script reading it ---
    "crm/dbt/dbt_project.yml": """
        name: crm_dbt
        version: "1.0"
        profile: crm_dbt
    """,
    "crm/dbt/profiles.yml": """
        crm_dbt:
          target: dev
          outputs:
            dev:
              type: duckdb
              path: crm.duckdb
              threads: 1
    """,
    "crm/dbt/seeds/accounts_raw.csv": "account_id,name,tier\n1,Acme,gold\n2,Globex,silver\n3,Initech,gold\n",
    "crm/dbt/models/accounts.sql": """
        select account_id, upper(name) as name, tier = 'gold' as is_gold from {{ ref('accounts_raw') }}
    """,
    "crm/account_tiers.py": """
        # pipeline
        # materialize ducklake://main/account_tiers
        from lineage_defs import runtime

        SOURCE = "dbt://crm/main/accounts"  # the crm project's model, read through its own database
        con = runtime.connect()
        runtime.write(con.sql("SELECT is_gold, count(*) AS accounts FROM crm.main.accounts GROUP BY ALL ORDER BY ALL").fetch_arrow_table())
    """,
    "crm/gold_accounts.sql": """
        -- pipeline
        -- materialize ducklake://main/gold_accounts
        SELECT account_id, name FROM crm.main.accounts WHERE is_gold
    """,
}


def write_files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    return root


def settled(root: Path) -> Path:
    """Wait until every file under ``root`` last changed long enough ago for a load to keep its plan (``plan.snapshot``)."""
    from lineage_defs.plan.snapshot import TRUST_AFTER_NS

    newest = max((max(st.st_mtime_ns, st.st_ctime_ns) for p in root.rglob("*") if p.is_file() for st in [p.stat()]), default=0)
    time.sleep(max(0.0, (newest + TRUST_AFTER_NS - time.time_ns()) / 1e9 + 0.05))
    return root


def stand_in_engine(path: Path, compile_body: str) -> Path:
    """An executable standing in for a static-analysis engine (dbt Fusion needs a login here).

    ``--version`` says it is one; ``compile`` runs ``compile_body`` (Python, with
    ``target`` = the --target-path it was given).
    """
    path.write_text(
        f"#!{sys.executable}\n"
        "import sys, pathlib\n"
        "args = sys.argv[1:]\n"
        "if '--version' in args:\n"
        "    print('dbt-fusion 2.0.0-stand-in')\n"
        "    sys.exit(0)\n"
        "target = pathlib.Path(args[args.index('--target-path') + 1])\n"
        + textwrap.dedent(compile_body)
    )
    path.chmod(0o755)
    return path
