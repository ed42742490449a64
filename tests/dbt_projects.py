"""Real dbt-duckdb projects for the tests, written into a pipelines folder beside scripts."""

from __future__ import annotations

import sys
import textwrap
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


def write_files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
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
