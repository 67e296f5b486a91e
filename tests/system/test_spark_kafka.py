"""Spark reads Kafka through the real connector; versions and Python workers line up."""

import json
import sys
from pathlib import Path

import pytest
from kafka import KafkaProducer

pytestmark = pytest.mark.foundation


def test_pyspark_python_matches_jar_version(spark):
    import pyspark

    jar_version = spark.sparkContext._jsc.version()  # asked of the JVM, i.e. of spark-core's jar
    assert pyspark.__version__ == jar_version
    jars = Path(pyspark.__file__).parent / "jars"
    assert (jars / f"spark-core_2.13-{pyspark.__version__}.jar").exists()


def test_python_workers_run_the_venv(spark):
    exes = spark.sparkContext.parallelize(range(4), 2).map(lambda _: __import__("sys").executable).collect()
    assert set(exes) == {sys.executable}


def test_structured_streaming_reads_kafka_exactly(spark, kafka_bootstrap, make_topics, unique_name, tmp_path):
    topic = f"{unique_name}.in"
    make_topics({topic: 3})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    expected = set()
    for i in range(300):
        value = json.dumps({"n": i}).encode()
        producer.send(topic, key=f"key-{i % 17}".encode(), value=value).get(timeout=30)
        expected.add((f"key-{i % 17}", i))
    producer.close()

    df = (spark.readStream.format("kafka")
          .option("kafka.bootstrap.servers", kafka_bootstrap)
          .option("subscribe", topic)
          .option("startingOffsets", "earliest")
          .load()
          .selectExpr("CAST(key AS STRING) AS k", "CAST(get_json_object(CAST(value AS STRING), '$.n') AS INT) AS n"))
    out = tmp_path / "out"
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 300
    assert {(r.k, r.n) for r in rows} == expected
