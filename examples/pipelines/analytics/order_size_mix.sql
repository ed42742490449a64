-- pipeline
-- partitioned daily start=2025-01-01
-- materialize ducklake://main/order_size_mix
-- data_test not_null size_band
-- tag finance
--
-- Each order size band's share of one day's revenue. The bands come from a
-- hand-written pandas asset, order_sizes in examples/python_assets.py: this
-- script depends on it like on any step.
SELECT
    size_band,
    orders,
    revenue_eur,
    round(revenue_eur / sum(revenue_eur) OVER (), 4) AS revenue_share
FROM lake.main.order_sizes
WHERE _partition = $partition
