-- pipeline
-- on schedule cron="0 * * * *"
-- trigger manual
-- materialize ducklake://main/kpi_snapshots append
-- data_test row_count min=1 max=1
-- tag finance
-- owner team:analytics
--
-- Headline numbers, captured every hour and appended: the table is a time
-- series of how the totals moved, one row per run. It runs on its schedule
-- only (trigger manual), not each time an order lands.
WITH order_totals AS (
    SELECT count(*) AS orders_total, max(order_date) AS latest_order_date
    FROM lake.main.orders
),
revenue_totals AS (
    SELECT round(sum(revenue_eur), 2) AS revenue_eur_total
    FROM lake.main.daily_revenue
),
customer_totals AS (
    SELECT count(*) AS customers_total, count(*) FILTER (WHERE segment = 'vip') AS vip_customers
    FROM lake.main.dim_customers_current
)
SELECT
    CAST(current_timestamp AS TIMESTAMP) AS snapshot_ts,
    o.orders_total,
    o.latest_order_date,
    r.revenue_eur_total,
    c.customers_total,
    c.vip_customers
FROM order_totals AS o
CROSS JOIN revenue_totals AS r
CROSS JOIN customer_totals AS c
