-- pipeline
-- on postgres table=public.orders events=insert,update,delete
-- materialize ducklake://main/order_changes append
-- data_test accepted_values op = insert,update,delete
-- tag streaming
-- owner team:data-eng
--
-- Row changes of the shop's PostgreSQL table public.orders, as they happen.
-- Read through logical replication and appended: one row per insert, update
-- or delete, with the new row (or the old key of a delete) as JSON. Needs a
-- PostgreSQL server: set LINEAGE_PG_DSN (a libpq DSN of a PostgreSQL with
-- wal_level=logical, a role with REPLICATION, and a table public.orders
-- with a primary key). The demo's embedded default has none,
-- so the sensor only says what to set.
SELECT
    json_extract_string(value, '$.op') AS op,
    CAST(coalesce(json_extract_string(value, '$.new.order_id'), json_extract_string(value, '$.old_key.order_id')) AS BIGINT) AS order_id,
    nullif(CAST(json_extract(value, '$.new') AS VARCHAR), 'null') AS new_row,
    "timestamp" AS committed_ts
FROM _events
