-- pipeline
-- on kafka topic=shop.order_events max_batch=5000
-- materialize ducklake://main/order_events append
-- data_test not_null order_id
-- data_test accepted_values event_type = placed,paid,shipped,delivered,cancelled
-- tag streaming
-- owner team:data-eng
--
-- Order status changes from the shop's event bus, appended as they arrive:
-- one row per Kafka message of the topic shop.order_events (JSON values
-- like {"order_id": 17, "event_type": "shipped"}). The Kafka sensor stores
-- each batch before a run reads it from _events, and the append records the
-- batch in the same transaction, so a retried or re-executed run adds no
-- row twice. Without LINEAGE_KAFKA_BOOTSTRAP the sensor only says so.
SELECT
    CAST(json_extract_string(value, '$.order_id') AS BIGINT) AS order_id,
    json_extract_string(value, '$.event_type') AS event_type,
    "timestamp" AS event_ts,
    "partition" AS kafka_partition,
    "offset" AS kafka_offset
FROM _events
