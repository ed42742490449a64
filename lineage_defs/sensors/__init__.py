"""Sensors for Kafka, webhook and cascade triggers."""
