"""Fixtures of the spark_jobs tests: a fake SparkSession builder that records the configuration a
session would start with, and a directory of connector jars, so no JVM starts."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import SparkSession

import spark_jobs.session as S
from spark_jobs import ship


class FakeBuilder:
    def __init__(self) -> None:
        self.conf: dict[str, str] = {}
        self.py_files: list[str] = []
        self.log_level = ""

    def appName(self, name: str) -> FakeBuilder:  # noqa: N802 - PySpark's name
        self.conf["spark.app.name"] = name
        return self

    def master(self, master: str) -> FakeBuilder:
        self.conf["spark.master"] = master
        return self

    def config(self, key: str, value: str) -> FakeBuilder:
        self.conf[key] = value
        return self

    def getOrCreate(self) -> Any:  # noqa: N802
        sc = SimpleNamespace(setLogLevel=lambda level: setattr(self, "log_level", level),
                             addPyFile=self.py_files.append)
        return SimpleNamespace(sparkContext=sc)


@pytest.fixture
def jars(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    for name in ("spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar", "README"):
        (tmp_path / name).write_text("")
    (tmp_path / "sink").mkdir()
    (tmp_path / "sink" / "ballast-sink.jar").write_text("")
    monkeypatch.setattr(S, "CONNECTOR_JARS", tmp_path)
    monkeypatch.setattr(S, "SINK_JARS", tmp_path / "sink")
    return tmp_path


@pytest.fixture
def builder(monkeypatch, jars):  # type: ignore[no-untyped-def]
    b = FakeBuilder()
    monkeypatch.setattr(SparkSession, "builder", b)
    for var in ("BALLAST_DRIVER_HOST", "SPARK_MASTER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(ship, "job_archive", lambda: Path("/dist/ballast-0123456789abcdef.zip"))
    return b
