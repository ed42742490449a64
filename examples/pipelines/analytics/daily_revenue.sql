-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/daily_revenue
-- mute ducklake://main/products
-- use shop/macros/money.sql
-- data_test not_null category
-- data_test accepted_values segment = new,regular,vip,unknown
-- data_test row_count min=1 max=20
-- freshness 1d warn=6h
-- tag finance
-- owner team:analytics
--
-- Revenue of one day by product category and current customer segment,
-- gross and net of VAT, with each group's share of the day and its rank.
-- Cancelled orders do not count. The catalogue is muted: a price change in
-- products re-runs nothing here, new orders do.
WITH day_orders AS (
    SELECT order_id, customer_id, product_id, amount_eur
    FROM lake.main.orders
    WHERE order_ts >= $partition_start::TIMESTAMP
      AND order_ts < $partition_end::TIMESTAMP
      AND status <> 'cancelled'
),
enriched AS (
    SELECT
        o.order_id,
        o.amount_eur,
        p.category,
        coalesce(c.segment, 'unknown') AS segment
    FROM day_orders AS o
    JOIN lake.main.products AS p ON p.product_id = o.product_id
    LEFT JOIN lake.main.dim_customers_current AS c ON c.customer_id = o.customer_id
)
SELECT
    CAST($partition_start::TIMESTAMP AS DATE) AS revenue_date,
    category,
    segment,
    count(*) AS order_count,
    round(sum(amount_eur), 2) AS revenue_eur,
    net_of_vat(sum(amount_eur), 0.19) AS revenue_net_eur,
    round(sum(amount_eur) / sum(sum(amount_eur)) OVER (), 4) AS revenue_share,
    rank() OVER (ORDER BY sum(amount_eur) DESC) AS revenue_rank
FROM enriched
GROUP BY category, segment
