"""Ballast's Kafka writer (spark_jobs.id_sink, jvm/ballast-sink) on the test broker: rows it cannot
write are refused before any record is sent, saying what is missing. (What it writes:
tests/spark_jobs/test_stateless.py.)"""

from __future__ import annotations

import pytest

from spark_jobs import id_sink

pytestmark = [pytest.mark.dataplane, pytest.mark.services]

ROW = "CAST(NULL AS STRING) AS topic, CAST(NULL AS BINARY) AS key, value, 0 AS __p, CAST(id AS BIGINT) AS __o"


def _rows(spark, value_bytes: int, n: int = 3):  # type: ignore[no-untyped-def]
    return spark.range(n).selectExpr(f"CAST(repeat('x', {value_bytes}) AS BINARY) AS value", "id").selectExpr(
        *ROW.split(", "))


def test_rows_without_an_id_column_are_refused_with_what_to_give(spark, kafka_bootstrap):
    rows = _rows(spark, 10).drop("__o")
    with pytest.raises(Exception, match=r"needs a column __o \(bigint\)"):
        id_sink.writer(rows, 1, kafka_bootstrap, {}).option("topic", "unused").save()


def test_rows_without_a_topic_need_the_topic_option(spark, kafka_bootstrap):
    with pytest.raises(Exception, match="no topic: give the rows a `topic` column or the write a `topic` option"):
        id_sink.writer(_rows(spark, 10).drop("topic"), 1, kafka_bootstrap, {}).save()


def test_dead_letters_without_a_topic_column_need_the_dead_letter_topic_option(spark, kafka_bootstrap):
    """A row with a `__reason` is a dead letter: with no topic column and no `dead-letter-topic` it
    would land among the outputs, so the write is refused before any record is sent."""
    rows = _rows(spark, 10).drop("topic").selectExpr("*", "CAST(NULL AS STRING) AS __reason")
    with pytest.raises(Exception, match="no topic for dead letters.*`dead-letter-topic` option"):
        id_sink.writer(rows, 1, kafka_bootstrap, {}, "unused").save()


def _producer_config(spark, options: dict[str, str]) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The producer settings both of Ballast's writers derive from a write's options (the jar's
    package-private `Producers.config`, called through the driver JVM)."""
    sc = spark.sparkContext
    loader = sc._jvm.Thread.currentThread().getContextClassLoader()
    cls = sc._jvm.java.lang.Class.forName("io.ballast.sink.Producers", True, loader)
    method = next(m for m in cls.getDeclaredMethods() if m.getName() == "config")
    method.setAccessible(True)
    jmap = sc._jvm.java.util.HashMap()
    for k, v in options.items():
        jmap.put(k, v)
    args = sc._gateway.new_array(sc._jvm.java.lang.Object, 1)
    args[0] = jmap
    return dict(method.invoke(None, args))


def test_the_writers_batch_unless_the_write_says_otherwise(spark):
    """docs/dataplane.md "How Ballast's writers batch": 512 KiB batches and 5 ms to fill one where a
    write gives no `kafka.batch.size` / `kafka.linger.ms`; a write's own settings win."""
    conf = _producer_config(spark, {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"})
    assert conf == {"bootstrap.servers": "127.0.0.1:1", "batch.size": str(512 * 1024), "linger.ms": "5"}
    own = _producer_config(spark, {"kafka.bootstrap.servers": "127.0.0.1:1", "kafka.batch.size": "16384",
                                   "kafka.linger.ms": "0"})
    assert own["batch.size"] == "16384" and own["linger.ms"] == "0"
