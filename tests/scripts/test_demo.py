"""scripts/demo.py's guard before its own plan, on a real SQLite metrics DB: a plan that a live run
drives is waited for, and one left open by a gone run (an interrupted earlier demo) is failed. This
keeps `make demo` safe to re-run when Airflow's first scheduled rebalance opens a plan as the stack
starts."""

from __future__ import annotations

import importlib.util
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from ballast import store
from migrations_db import models as m
from migrations_db.db import session_scope

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def _demo(db_url: str, job: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    spec = importlib.util.spec_from_file_location("ballast_demo_script", REPO / "scripts" / "demo.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    monkeypatch.setattr(mod, "JOB", job)
    monkeypatch.setattr(mod, "default_url", lambda: db_url)
    return mod


def _plan(job: str, plan_id: str, owner: str) -> store.PlanRecord:
    return store.PlanRecord(plan_id, job, "keycount", datetime.now(UTC), "batched", "emitting", 0, 1, 2,
                           (0, 1), 1, {}, None, "test", None, owner)


def test_the_demo_waits_for_a_live_plan_and_fails_a_gone_one(db_url, unique_name, monkeypatch):
    demo = _demo(db_url, unique_name, monkeypatch)
    store.save_plan(db_url, _plan(unique_name, "left-over", "ballast_migrate/manual__old"), [])
    with session_scope(db_url) as s:  # its run stopped renewing the lease an hour ago
        s.execute(update(m.Plan).where(m.Plan.plan_id == "left-over")
                  .values(owner_seen_at=datetime.now(UTC) - timedelta(hours=1)))
    demo.settle_open_plans(timeout_s=30)
    assert store.get_plan(db_url, "left-over").status == "failed"  # type: ignore[union-attr]

    store.save_plan(db_url, _plan(unique_name, "scheduled", "ballast_rebalance__clicks/scheduled__x"), [])
    done = threading.Timer(2.0, store.set_plan_status, (db_url, "scheduled", "completed"))
    done.start()
    t0 = time.monotonic()
    try:
        demo.settle_open_plans(timeout_s=30)
    finally:
        done.cancel()
    assert time.monotonic() - t0 >= 1.5  # it waited for the live run's plan...
    assert store.get_plan(db_url, "scheduled").status == "completed"  # type: ignore[union-attr]  # ...untouched

    store.save_plan(db_url, _plan(unique_name, "stuck", "ballast_rebalance__clicks/scheduled__y"), [])
    with pytest.raises(SystemExit, match="python -m ballast.control fail stuck"):
        demo.settle_open_plans(timeout_s=1)
