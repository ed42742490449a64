"""Trigger events (Kafka messages, webhook posts): the durable store and partition values. No Dagster."""
