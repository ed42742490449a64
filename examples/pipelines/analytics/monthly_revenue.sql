-- pipeline
-- partitioned monthly start=2025-01-01
-- materialize ducklake://main/monthly_revenue on_schema_change=fail
-- debounce 10m
-- data_test unique category
-- data_test not_null revenue_eur
-- tag finance
-- owner finance@shop.example
--
-- Revenue of one calendar month per product category, rolled up from the
-- daily revenue, with the change against the month before. Fed by a daily
-- asset: each day that lands re-runs its month (after ten quiet minutes,
-- so a backfill of thirty days runs the month once). Finance reads this
-- table, so a change of its columns fails the run instead of passing on.
WITH month_days AS (
    SELECT revenue_date, category, order_count, revenue_eur, revenue_net_eur
    FROM lake.main.daily_revenue
    WHERE revenue_date >= CAST($partition_start::TIMESTAMP AS DATE)
      AND revenue_date < CAST($partition_end::TIMESTAMP AS DATE)
),
previous_month AS (
    SELECT category, sum(revenue_eur) AS revenue_eur
    FROM lake.main.daily_revenue
    WHERE revenue_date >= CAST($partition_start::TIMESTAMP - INTERVAL 1 MONTH AS DATE)
      AND revenue_date < CAST($partition_start::TIMESTAMP AS DATE)
    GROUP BY category
),
by_category AS (
    SELECT
        category,
        count(DISTINCT revenue_date) AS days_with_sales,
        sum(order_count) AS order_count,
        round(sum(revenue_eur), 2) AS revenue_eur,
        round(sum(revenue_net_eur), 2) AS revenue_net_eur
    FROM month_days
    GROUP BY category
)
SELECT
    CAST($partition_start::TIMESTAMP AS DATE) AS month_start,
    m.category,
    m.days_with_sales,
    m.order_count,
    m.revenue_eur,
    m.revenue_net_eur,
    round(m.revenue_eur / m.days_with_sales, 2) AS revenue_per_day_eur,
    round(m.revenue_eur / nullif(p.revenue_eur, 0) - 1, 4) AS change_vs_previous_month
FROM by_category AS m
LEFT JOIN previous_month AS p ON p.category = m.category
