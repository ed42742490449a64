-- pipeline
-- partitioned daily start=2025-01-01
-- on s3:///raw/orders/{partition}.csv
-- materialize ducklake://main/orders
-- use macros/money.sql
-- data_test unique order_id
-- data_test not_null customer_id
-- data_test accepted_values status = placed,shipped,delivered,cancelled,"on hold"
-- data_test relationships customer_id -> ducklake://main/customers.customer_id
-- data_test row_count min=100 max=5000
-- data_test tests/order_amounts.sql
-- freshness 1d warn=12h
-- tag core
-- owner team:data-eng
--
-- Orders of one day, typed and cleaned: one row per order with the amount
-- paid in euros. Each run replaces exactly the day it is given, so re-running
-- a day (or backfilling a month) never duplicates orders.
WITH raw AS (
    SELECT order_id, customer_id, order_ts, product_id, quantity, unit_price_cents, discount_cents, status, payment_method
    FROM read_csv(
        's3:///raw/orders/{partition}.csv',
        header = true,
        columns = {
            'order_id': 'BIGINT', 'customer_id': 'BIGINT', 'order_ts': 'TIMESTAMP',
            'product_id': 'INTEGER', 'quantity': 'INTEGER', 'unit_price_cents': 'INTEGER',
            'discount_cents': 'INTEGER', 'status': 'VARCHAR', 'payment_method': 'VARCHAR'
        }
    )
)
SELECT
    order_id,
    customer_id,
    order_ts,
    CAST(order_ts AS DATE) AS order_date,
    product_id,
    quantity,
    unit_price_cents,
    discount_cents,
    lower(trim(status)) AS status,
    payment_method,
    cents_to_eur(quantity * unit_price_cents - discount_cents) AS amount_eur
FROM raw
-- The file is the day's export: the window guards against stray rows.
WHERE order_ts >= $partition_start::TIMESTAMP
  AND order_ts < $partition_end::TIMESTAMP
