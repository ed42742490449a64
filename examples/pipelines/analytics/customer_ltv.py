# pipeline
# on ducklake://main/orders debounce=15m
# on ducklake://main/dim_customers
# materialize duckdb://warehouse/customer_ltv
# column customer_id <- ducklake://main/orders.customer_id copy
# column segment <- ducklake://main/dim_customers.segment copy
# column order_count <- ducklake://main/orders.order_id
# column lifetime_value_eur <- ducklake://main/orders.amount_eur
# column avg_order_eur <- ducklake://main/orders.amount_eur
# column first_order_date <- ducklake://main/orders.order_date
# column last_order_date <- ducklake://main/orders.order_date
# column value_tier <- ducklake://main/orders.amount_eur, ducklake://main/dim_customers.segment
# data_test unique customer_id
# data_test accepted_values value_tier = gold,silver,bronze
# pool warehouse_file
# freshness 2d warn=1d
# owner team:analytics
#
# Lifetime value per customer, computed in pandas over all orders that were
# not cancelled: order count, total and average spend, first and last order,
# and a value tier (the top tenth of spenders and every VIP are gold, the
# next three tenths silver). Written to the warehouse DuckDB file, where the
# CRM team's tools pick it up.
# The reads go through runtime.connect(), which the graph cannot see into:
# the `on` lines declare them, and the `column` lines declare the lineage.
# The pool keeps writers of the single warehouse file from running at once.
from __future__ import annotations

import pandas as pd

from lineage_defs import runtime

con = runtime.connect()
orders = con.sql(
    """
    SELECT customer_id, order_id, order_date, amount_eur
    FROM lake.main.orders
    WHERE status <> 'cancelled'
    """
).df()
segments = con.sql("SELECT customer_id, segment FROM lake.main.dim_customers_current").df()

ltv = (
    orders.groupby("customer_id")
    .agg(
        order_count=("order_id", "nunique"),
        lifetime_value_eur=("amount_eur", "sum"),
        first_order_date=("order_date", "min"),
        last_order_date=("order_date", "max"),
    )
    .reset_index()
)
ltv["lifetime_value_eur"] = ltv["lifetime_value_eur"].astype(float).round(2)
for day in ("first_order_date", "last_order_date"):  # pandas made them timestamps
    ltv[day] = pd.to_datetime(ltv[day]).dt.date
ltv["avg_order_eur"] = (ltv["lifetime_value_eur"] / ltv["order_count"]).round(2)
ltv = ltv.merge(segments, on="customer_id", how="left")
ltv["segment"] = ltv["segment"].fillna("unknown")

# Tiers by spend rank: the top 10 % gold, the next 30 % silver; VIPs are gold.
spend_rank = ltv["lifetime_value_eur"].rank(method="first", ascending=False, pct=True)
ltv["value_tier"] = "bronze"
ltv.loc[spend_rank <= 0.4, "value_tier"] = "silver"
ltv.loc[(spend_rank <= 0.1) | (ltv["segment"] == "vip"), "value_tier"] = "gold"

runtime.write(
    ltv[
        [
            "customer_id",
            "segment",
            "order_count",
            "lifetime_value_eur",
            "avg_order_eur",
            "first_order_date",
            "last_order_date",
            "value_tier",
        ]
    ]
)
