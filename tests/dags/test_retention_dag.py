"""ballast_retention runs under `dag.test()` against a real metrics DB and prunes old epochs."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ballast import store as repo
from migrations_db import models as m
from tests.helpers.epoch_seed import count_rows as _count
from tests.helpers.epoch_seed import seed_epochs as _seed

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def test_retention_dag_prunes_old_epochs(airflow_db, db_url, unique_name, monkeypatch):
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    _seed(db_url, unique_name, epochs=100, bins=4, now=datetime.now(UTC) - timedelta(days=3))
    spec = importlib.util.spec_from_file_location("test_ballast_retention", REPO / "dags" / "ballast_retention.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    assert mod.dag.schedule == "@daily"
    dr = mod.dag.test(run_conf={"keep_hours": 48, "keep_epochs": 30})
    assert str(dr.state) == "success", [(ti.task_id, ti.state) for ti in dr.get_task_instances()]
    assert _count(db_url, m.EpochMetrics, unique_name) == 30  # all older than 48 h: the newest 30 stay
    assert repo.latest_epoch(db_url, unique_name, "keycount") == 100
