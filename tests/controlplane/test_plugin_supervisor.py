"""The hooks' defaults and the supervisor's health verdicts (the console: test_console.py)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from ballast.config import get_job
from migrations_db import models as m
from migrations_db.db import session_scope

pytestmark = pytest.mark.controlplane


def test_hooks_fall_back_to_environment_without_connections(airflow_db, monkeypatch):
    from ballast.hooks import BallastKafkaHook, BallastMetricsDbHook

    monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", "kafka.example.internal:19092")
    monkeypatch.setenv("BALLAST_DB_URL", "sqlite:////tmp/elsewhere.db")
    assert BallastKafkaHook().bootstrap() == "kafka.example.internal:19092"
    assert BallastMetricsDbHook().url() == "sqlite:////tmp/elsewhere.db"
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_KAFKA", "kafka://broker-a:9094")
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_METRICS_DB",
                       '{"conn_type": "postgres", "host": "db", "port": 5432, "login": "u", "password": "p@ss", "schema": "m"}')
    assert BallastKafkaHook().bootstrap() == "broker-a:9094"
    assert BallastMetricsDbHook().url() == "postgresql+psycopg2://u:p%40ss@db:5432/m"


def test_supervisor_health_verdicts(db_url, jobs_file, unique_name):
    from ballast import supervisor

    jobs_file(bins=16)
    cfg = get_job(unique_name)
    assert supervisor.check(cfg, db_url).status == "missing"
    now = datetime.now(timezone.utc)
    with session_scope(db_url) as s:
        s.add(m.Heartbeat(job=unique_name, operator="keycount", last_epoch=7, map_version=0, workers=1,
                          updated_at=now, started_at=now, pid=1, host="h", status="running"))
    h = supervisor.check(cfg, db_url)
    assert h.status == "healthy" and "epoch 7" in h.message
    later = now + timedelta(seconds=cfg.heartbeat_timeout_s + 5)
    h = supervisor.check(cfg, db_url, now=later)
    assert h.status == "stale" and "old" in h.message


def test_data_plane_command_line(jobs_file, unique_name):
    from ballast import supervisor

    jobs_file(bins=16)
    cmd = supervisor.cli_command(get_job(unique_name), "127.0.0.1:9092", "sqlite:////x.db")
    assert cmd[1:4] == ["-m", "spark_jobs.cli", "run"]
    assert cmd[cmd.index("--bins") + 1] == "16" and cmd[cmd.index("--input-topic") + 1] == f"{unique_name}.in"
