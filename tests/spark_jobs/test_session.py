"""spark_jobs.session: every session gets the Kafka connector's jars (missing jars: an error saying
to run `make setup`), this venv's Python, UTC as its SQL time zone and the project's settings; local
mode stays on loopback, and on a cluster the job's code is shipped to the executors. A fake
builder (tests/spark_jobs/conftest.py) records the configuration: no JVM starts here."""

from __future__ import annotations

import pytest

import spark_jobs.session as S

pytestmark = pytest.mark.dataplane


def test_the_connector_jars_are_the_cached_jars_and_missing_ones_say_what_to_run(jars, tmp_path, monkeypatch):
    assert S.connector_jars() == [str(jars / "kafka-clients-3.9.2.jar"),
                                  str(jars / "spark-sql-kafka-0-10_2.13-4.2.0.jar"),
                                  str(jars / "sink" / "ballast-sink.jar")]
    (jars / "sink" / "ballast-sink.jar").unlink()
    with pytest.raises(RuntimeError, match=r"Kafka writer .*ballast-sink.jar is missing: run `make setup`"):
        S.connector_jars()
    (jars / "spark-sql-kafka-0-10_2.13-4.2.0.jar").unlink()
    with pytest.raises(RuntimeError, match=r"Spark Kafka connector jars missing in .*: run `make setup`"):
        S.connector_jars()


def test_a_local_session_stays_on_loopback_in_utc_with_this_python(builder, jars, monkeypatch):
    monkeypatch.setenv("BALLAST_SHUFFLE_PARTITIONS", "7")
    S.build_spark("app", conf={"spark.sql.shuffle.partitions": "3", "spark.extra": "x"})
    c = builder.conf
    assert c["spark.master"] == "local[2]" and c["spark.app.name"] == "app"
    assert c["spark.jars"] == ",".join(S.connector_jars())
    assert c["spark.sql.session.timeZone"] == "UTC" and c["spark.ui.enabled"] == "false"
    assert c["spark.driver.bindAddress"] == c["spark.driver.host"] == "127.0.0.1"
    assert c["spark.pyspark.python"] and c["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert c["spark.sql.shuffle.partitions"] == "3" and c["spark.extra"] == "x", "the caller's conf wins"
    assert builder.py_files == [] and builder.log_level == "WARN"


def test_a_cluster_session_ships_the_code_and_binds_where_spark_chooses(builder, monkeypatch):
    S.build_spark("app", master="spark://m:7077")
    assert builder.conf["spark.master"] == "spark://m:7077"
    assert "spark.driver.host" not in builder.conf and "spark.driver.bindAddress" not in builder.conf
    assert builder.py_files == ["/dist/ballast-0123456789abcdef.zip"]
    monkeypatch.setenv("BALLAST_DRIVER_HOST", "10.0.0.5")
    S.build_spark("app", master="spark://m:7077")
    assert builder.conf["spark.driver.host"] == "10.0.0.5"
