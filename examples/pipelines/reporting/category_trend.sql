-- pipeline
-- materialize ducklake://main/category_trend
-- data_test not_null category
-- owner team:analytics
--
-- Each category's revenue with its 7-day moving average, read from the dbt
-- mart's relation: warehouse.main.store_daily IS the asset
-- dbt://warehouse/main/store_daily, so this script runs after it.
SELECT
    order_date,
    category,
    revenue_eur,
    round(avg(revenue_eur) OVER (
        PARTITION BY category ORDER BY order_date
        ROWS BETWEEN 6 PRECEDING AND CURRENT ROW
    ), 2) AS revenue_7d_avg_eur
FROM warehouse.main.store_daily
