"""Fixtures of the data-plane tests (see dp_helpers.py for the oracles)."""

from __future__ import annotations

import pytest


@pytest.fixture
def produce_with_spark(spark, kafka_bootstrap):  # type: ignore[no-untyped-def]
    """Write many (key, value) records fast through Spark's Kafka writer (kafka-python is slow at 200k)."""

    def _produce(topic: str, keys: list[bytes], values: list[bytes] | None = None) -> None:
        rows = [(k, values[i] if values else b"1") for i, k in enumerate(keys)]
        df = spark.createDataFrame(rows, "key binary, value binary")
        df.write.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", topic).save()

    return _produce
