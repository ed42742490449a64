-- pipeline
-- partitioned daily start=2025-01-01
-- on s3:///raw/events/{partition}.csv debounce=2m
-- trigger all
-- materialize ducklake://main/daily_funnel
-- data_test accepted_values device = desktop,mobile,tablet
-- data_test not_null sessions
-- data_test row_count min=3 max=3 severity=warn
-- tag marketing
-- owner team:analytics
--
-- The day's shopping funnel per device: sessions, and how many of them
-- viewed a product, filled a cart and bought. A session is a visitor's run
-- of events without a 30-minute gap. Runs once both the day's clickstream
-- and the day's orders are in (trigger all), and sets the shop's order
-- count against all sessions of the day.
WITH events AS (
    SELECT visitor_id, device, event_type, event_ts
    FROM read_csv('s3:///raw/events/{partition}.csv', header = true, timestampformat = '%Y-%m-%d %H:%M:%S')
),
marked AS (
    SELECT
        visitor_id,
        device,
        event_type,
        event_ts,
        CASE
            WHEN event_ts - lag(event_ts) OVER (PARTITION BY visitor_id ORDER BY event_ts) <= INTERVAL 30 MINUTE THEN 0
            ELSE 1
        END AS starts_session
    FROM events
),
numbered AS (
    SELECT
        visitor_id,
        device,
        event_type,
        sum(starts_session) OVER (PARTITION BY visitor_id ORDER BY event_ts ROWS UNBOUNDED PRECEDING) AS session_no
    FROM marked
),
session_flags AS (
    SELECT
        visitor_id,
        session_no,
        any_value(device) AS device,
        bool_or(event_type = 'product_view') AS viewed_product,
        bool_or(event_type = 'add_to_cart') AS filled_cart,
        bool_or(event_type = 'purchase') AS purchased
    FROM numbered
    GROUP BY visitor_id, session_no
),
day_orders AS (
    SELECT count(*) AS shop_orders
    FROM lake.main.orders
    WHERE order_date = CAST('{partition}' AS DATE)
)
SELECT
    s.device,
    count(*) AS sessions,
    count(*) FILTER (WHERE s.viewed_product) AS product_sessions,
    count(*) FILTER (WHERE s.filled_cart) AS cart_sessions,
    count(*) FILTER (WHERE s.purchased) AS purchase_sessions,
    round(count(*) FILTER (WHERE s.purchased) / count(*), 4) AS conversion_rate,
    round(100.0 * any_value(o.shop_orders) / sum(count(*)) OVER (), 2) AS shop_orders_per_100_sessions
FROM session_flags AS s
CROSS JOIN day_orders AS o
GROUP BY s.device
