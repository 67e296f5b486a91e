"""dags/ballast_retention.py: a daily prune of the per-epoch metrics, one run at a time, whose form
refuses a window that keeps nothing; under `dag.test()` against a real metrics DB it prunes old
epochs and keeps the newest."""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ballast import store
from migrations_db import models as m
from tests.helpers.dag_bag import dag_bag, run_params
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
    assert store.latest_epoch(db_url, unique_name, "keycount") == 100


def test_the_prune_runs_daily_and_its_form_refuses_a_window_that_keeps_nothing(tmp_path):
    from airflow.sdk.exceptions import ParamValidationError

    from ballast.store.retention import DEFAULT_KEEP, DEFAULT_KEEP_EPOCHS

    dag = dag_bag(tmp_path).dags["ballast_retention"]
    assert [t.task_id for t in dag.tasks] == ["prune"] and dag.get_task("prune").retries == 1
    assert dag.schedule == "@daily" and dag.max_active_runs == 1 and not dag.catchup
    assert run_params(dag, {}) == {"keep_hours": DEFAULT_KEEP.total_seconds() / 3600,
                                   "keep_epochs": DEFAULT_KEEP_EPOCHS}
    assert run_params(dag, {"keep_hours": 1.5, "keep_epochs": 1}) == {"keep_hours": 1.5, "keep_epochs": 1}
    for conf, why in (({"keep_hours": 0}, "less than the minimum"), ({"keep_epochs": 0}, "less than the minimum"),
                      ({"keep_epochs": 2.5}, "not of type 'integer'"), ({"keep_hours": "a day"}, "not of type")):
        with pytest.raises(ParamValidationError, match=why):
            run_params(dag, conf)
