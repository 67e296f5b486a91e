"""controller.evaluate on real DB rows: decisions stay valid JSON when DS2 has no finite answer."""

from __future__ import annotations

import json

import pytest

from ballast import controller
from ballast import store as repo
from ballast.config import load_jobs
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane


def test_overhead_filling_the_budget_gives_a_json_safe_decision(db_url, jobs_file, unique_name):
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    with session_scope(db_url) as s:  # every batch spends 5 s outside the workers: > the 1 s budget
        for row in s.query(m.EpochMetrics).filter_by(job=unique_name):
            row.batch_ms = 5000.0
    cfg = load_jobs()[unique_name]
    out = controller.evaluate(db_url, cfg, controller.collect(db_url, cfg))
    json.dumps(out, allow_nan=False)  # XCom rejects inf/nan
    d = repo.latest_decision(db_url, unique_name, "keycount")
    json.dumps(d.inputs, allow_nan=False)  # PostgreSQL's JSON type too
    assert d.action == "no_change" and out["utilization"] is None
    # and it does not hide the cause: the reason names the infeasibility and a trigger interval that fits
    assert "infeasible" in d.reason and "trigger interval" in d.reason
    assert d.inputs["ds2.advised_budget_s"] > 5.0  # the 5 s overhead must fit inside it


def test_growing_backlog_with_idle_workers_is_explained_not_scaled(db_url, jobs_file, unique_name):
    """The workers are 10 % busy but every epoch ends further behind: Spark's own work is the
    bottleneck. DS2 rightly keeps W; the decision must say why the backlog grows."""
    jobs_file(bins=16)
    # 1000 rows/s at 10k rows per useful second: utilization ~0.1
    seed_job(db_url, unique_name, bins=16, input_rate=1000.0, per_worker_rate=10000.0, epochs=6)
    with session_scope(db_url) as s:
        for row in s.query(m.EpochMetrics).filter_by(job=unique_name):
            row.backlog = 300 * row.epoch
            row.batch_ms = 600.0
    cfg = load_jobs()[unique_name]
    out = controller.evaluate(db_url, cfg, controller.collect(db_url, cfg))
    d = repo.latest_decision(db_url, unique_name, "keycount")
    assert out["action"] == "no_change" and d.target_workers == 1
    assert "outside the operators" in d.reason and d.inputs["diagnosis"]
