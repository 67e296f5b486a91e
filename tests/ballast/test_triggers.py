"""CheckpointTrigger: serialize round-trip (a connection id, never a URL with its password) and
firing on a real SQLite metrics DB, which the trigger finds through the `ballast_metrics_db`
connection (here its BALLAST_DB_URL fallback, or an AIRFLOW_CONN_ variable)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from ballast import controller, store
from ballast.config import get_job
from ballast.triggers import CheckpointTrigger
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane


def _checkpoint(db_url: str, job: str, plan_id: str, step: int, status: str = "applied", reason: str = "") -> None:
    now = datetime.now(UTC)
    with session_scope(db_url) as s:
        s.add(m.StepCheckpoint(job=job, operator="keycount", plan_id=plan_id, step=step, status=status,
                           applied_epoch=10 + step, applied_at=now, completed_at=now, bins_moved=1,
                           map_version_after=step, reason=reason))


async def _first_event(trigger: CheckpointTrigger, timeout: float = 15.0) -> dict:
    gen = trigger.run()
    ev = await asyncio.wait_for(gen.__anext__(), timeout)
    await gen.aclose()
    return ev.payload


def _deadline(s: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=s)).isoformat()


CONN = "ballast_metrics_db"


@pytest.fixture
def plan_id(db_url, jobs_file, unique_name, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    out = controller.plan_manual(db_url, get_job(unique_name), {"target_workers": 2, "strategy": "fluid",
                                                                "dry_run": False})
    return out["plan_id"]


def test_serialize_round_trips():
    t = CheckpointTrigger(CONN, "p-1", [1, 2, 3], _deadline(60), poll_interval=0.5)
    path, kwargs = t.serialize()
    assert path == "ballast.triggers.CheckpointTrigger"
    import importlib

    mod, _, cls = path.rpartition(".")
    t2 = getattr(importlib.import_module(mod), cls)(**kwargs)
    assert t2.serialize() == (path, kwargs)
    import json

    assert json.loads(json.dumps(kwargs)) == kwargs  # stored as JSON by the triggerer
    assert kwargs["db_conn_id"] == CONN and "db_url" not in kwargs


def test_a_url_is_refused_in_place_of_a_connection_id():
    with pytest.raises(ValueError, match="connection id"):
        CheckpointTrigger("postgresql+psycopg2://ballast:s3cret@db/ballast", "p-1", [1], _deadline(60))


def test_sensor_trigger_carries_no_password(db_url, plan_id, monkeypatch):
    """The deferring sensor hands the triggerer a connection id; the password stays in the connection."""
    import json

    from airflow.sdk.exceptions import TaskDeferred

    from ballast.hooks import BallastMetricsDbHook
    from ballast.sensors import CheckpointSensor

    secret = "pA55-w0rd-xyz"
    # a postgres connection with a password whose extra points at the test's SQLite DB
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN.upper()}", json.dumps({
        "conn_type": "postgres", "host": "db.internal", "login": "ballast", "password": secret,
        "schema": "ballast", "extra": {"sqlalchemy_url": db_url}}))
    assert BallastMetricsDbHook(CONN).url() == db_url  # the connection is the one in force
    sensor = CheckpointSensor(task_id="await_checkpoints", plan_id=plan_id, db_conn_id=CONN, poke_interval=0.1)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({})
    path, kwargs = deferred.value.trigger.serialize()
    assert kwargs["db_conn_id"] == CONN
    assert secret not in json.dumps(kwargs) and "://" not in json.dumps(kwargs)
    # the trigger resolves the same connection when it runs: it fires once the checkpoints land
    plan = store.get_plan(db_url, plan_id)
    assert deferred.value.trigger.steps == list(range(1, plan.steps + 1))
    for step in deferred.value.trigger.steps:
        _checkpoint(db_url, plan.job, plan_id, step)
    ev = asyncio.run(_first_event(deferred.value.trigger))
    assert ev["status"] == "done"


def test_fires_when_checkpoints_land(db_url, unique_name, plan_id):
    trig = CheckpointTrigger(CONN, plan_id, [1, 2], _deadline(30), poll_interval=0.1)

    def land() -> None:
        time.sleep(0.5)
        _checkpoint(db_url, unique_name, plan_id, 1)
        time.sleep(0.3)
        _checkpoint(db_url, unique_name, plan_id, 2)

    th = threading.Thread(target=land)
    th.start()
    t0 = time.monotonic()
    ev = asyncio.run(_first_event(trig))
    th.join()
    assert ev["status"] == "done" and ev["plan_id"] == plan_id and time.monotonic() - t0 >= 0.7


def test_fires_rejected_with_reason(db_url, unique_name, plan_id):
    _checkpoint(db_url, unique_name, plan_id, 1, status="rejected", reason="expected map v0, job is at v3")
    ev = asyncio.run(_first_event(CheckpointTrigger(CONN, plan_id, [1, 2], _deadline(30), 0.1)))
    assert ev["status"] == "rejected" and ev["failed_step"] == 1 and "job is at v3" in ev["reason"]


def test_times_out_and_names_missing_steps(db_url, unique_name, plan_id):
    _checkpoint(db_url, unique_name, plan_id, 1)
    ev = asyncio.run(_first_event(CheckpointTrigger(CONN, plan_id, [1, 2, 3], _deadline(0.5), 0.1)))
    assert ev["status"] == "timeout" and ev["missing"] == [2, 3]
    assert store.get_plan(db_url, plan_id).status == "planned"  # the trigger only reports; the task fails the plan
