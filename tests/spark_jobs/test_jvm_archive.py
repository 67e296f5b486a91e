"""spark_jobs.jvm_archive: the driver's class-data archive is named after the JDK, the pyspark
version and the connector jars (an upgrade names another file), a session uses it only when it
exists and keeps the caller's own driver options, and a driver started from it runs Spark."""

from __future__ import annotations

import pytest

import spark_jobs.jvm_archive as A
import spark_jobs.session as S

pytestmark = pytest.mark.dataplane


def test_the_archive_is_named_after_the_jdk_spark_and_the_connector_jars(jars, monkeypatch):
    first = S.archive_path()
    assert first is not None and first.name.startswith("driver-") and first.suffix == ".jsa"
    assert S.archive_path() == first, "the same inputs name the same file"
    (jars / "kafka-clients-3.9.3.jar").write_text("")  # another connector set
    assert S.archive_path() != first
    monkeypatch.setattr("pyspark.__version__", "9.9.9")
    assert S.archive_path() not in (first, None)
    monkeypatch.setenv("PATH", "/nonexistent")  # no java: no archive, and no error
    assert S.archive_path() is None and S.java_option() is None


def test_a_session_starts_from_the_archive_only_when_it_exists(builder, tmp_path, monkeypatch):
    archive = tmp_path / "driver-x.jsa"
    monkeypatch.setattr(S, "archive_path", lambda: archive)
    S.build_spark("app")
    assert "spark.driver.extraJavaOptions" not in builder.conf, "no archive: nothing added"
    archive.write_bytes(b"x")
    S.build_spark("app", conf={"spark.driver.extraJavaOptions": "-Dmine=1"})
    assert builder.conf["spark.driver.extraJavaOptions"] == f"-Dmine=1 -XX:SharedArchiveFile={archive}"
    S.build_spark("app", conf={"spark.driver.extraJavaOptions": "-Dmine=1"}, archive=False)
    assert builder.conf["spark.driver.extraJavaOptions"] == "-Dmine=1"


@pytest.mark.slow
def test_the_suites_driver_runs_from_the_archive_setup_made(spark):
    """`make setup` made the archive (scripts/setup.sh); the session every test shares started from it."""
    path = S.archive_path()
    assert path is not None and path.is_file(), "make setup makes the archive (python -m spark_jobs.jvm_archive)"
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={path}" in args
    assert spark.range(100).selectExpr("sum(id) AS s").collect()[0].s == 4950
    assert A.make() == path, "up to date: made once, reused"


def test_a_failed_workload_leaves_no_archive_and_says_so(tmp_path, monkeypatch, capsys):
    target = tmp_path / "spark-cds" / "driver-y.jsa"
    monkeypatch.setattr(A, "archive_path", lambda: target)
    monkeypatch.setattr(A.sys, "executable", "/bin/false")  # the workload's child fails at once
    assert A.make() is None
    assert not target.exists() and not list(target.parent.glob("partial-*"))
    assert "jobs start without an archive" in capsys.readouterr().err
