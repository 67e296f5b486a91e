"""ballast.sensors: the wait for a plan's checkpoints ends in success once every awaited step applied,
or fails the plan (rejected step, timeout, an event it cannot read) before the task fails, so
nothing more is emitted for it; the deadline is the stored plan's under its job's settings; no plan
means nothing to wait for. Fast: the sensor pokes a real migrated SQLite metrics DB found through
the hook's BALLAST_DB_URL fallback, no Airflow metadata DB (deferral: test_triggers.py)."""

from __future__ import annotations

import logging

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from ballast import store
from ballast.config import get_job
from ballast.control import manual
from ballast.deadlines import for_plan
from ballast.protocol import step_from_document
from ballast.sensors import CheckpointSensor, handle_checkpoint_event, run_deadline
from tests.helpers.stepapplier import apply_step, seed_job

pytestmark = pytest.mark.controlplane
LOG = logging.getLogger("test_sensors")
NO_CONN = "t_sensor_no_connection"  # no such connection: the hook falls back to BALLAST_DB_URL


@pytest.fixture
def plan_id(db_url, jobs_file, unique_name, monkeypatch):  # type: ignore[no-untyped-def]
    """A stored plan (several steps) of a seeded job in the jobs file; BALLAST_DB_URL is its DB."""
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    out = manual.plan_manual(db_url, get_job(unique_name), {"target_workers": 2, "strategy": "fluid",
                                                            "dry_run": False})
    assert out["steps"] >= 2
    return out["plan_id"]


def _apply(url: str, plan_id: str, steps: list[int] | None = None, reject: str = "") -> None:
    p = store.get_plan(url, plan_id)
    assert p is not None
    done = store.checkpoints(url, plan_id)
    for rec in store.plan_steps(url, plan_id):
        if (steps is None or rec.step in steps) and rec.step not in done:
            apply_step(url, p.job, p.operator, step_from_document(rec.payload), reject)


def _sensor(plan_id: str, **kw) -> CheckpointSensor:  # type: ignore[no-untyped-def]
    return CheckpointSensor(task_id="await_checkpoints", plan_id=plan_id, db_conn_id=NO_CONN, **kw)


def test_the_deadline_is_the_stored_plans_under_its_jobs_settings(db_url, plan_id):
    p = store.get_plan(db_url, plan_id)
    assert p is not None
    d = run_deadline(db_url, plan_id)
    assert d == for_plan(p.predicted_ms, p.steps, p.params, get_job(p.job).rebalance) and d.total_ms > 0
    with pytest.raises(AirflowFailException, match="plan nope is not in the metrics DB"):
        run_deadline(db_url, "nope")


def test_a_plan_whose_job_left_the_jobs_file_cannot_be_awaited(db_url, plan_id, tmp_path, monkeypatch):
    empty = tmp_path / "other-jobs.yaml"
    empty.write_text("jobs: []\n")
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(empty))
    with pytest.raises(AirflowFailException, match="put the job back in the jobs file to finish it"):
        run_deadline(db_url, plan_id)


def test_done_is_success_and_the_plan_stays_as_it_is(db_url, plan_id, caplog):
    with caplog.at_level(logging.INFO, logger=LOG.name):
        handle_checkpoint_event(db_url, {"status": "done", "plan_id": plan_id, "steps": [1, 2]}, LOG)
    assert f"plan {plan_id}: step(s) [1, 2] checkpointed" in caplog.text
    assert store.get_plan(db_url, plan_id).is_open  # type: ignore[union-attr]


@pytest.mark.parametrize("event, kind, says", [
    ({"status": "rejected", "reason": "step 1 was rejected: stale"}, "plan_rejected", "failed: step 1 was rejected"),
    ({"status": "timeout", "reason": "deadline passed"}, "plan_timeout", "timed out: deadline passed"),
    ({"status": "lost"}, "plan_failed", "unexpected trigger event"),
])
def test_any_other_event_fails_the_plan_before_the_task(db_url, plan_id, event, kind, says):
    with pytest.raises(AirflowFailException, match=says) as exc:
        handle_checkpoint_event(db_url, {**event, "plan_id": plan_id}, LOG)
    assert "no further step will be emitted" in str(exc.value)
    assert store.get_plan(db_url, plan_id).status == "failed"  # type: ignore[union-attr]
    [ev] = store.events(db_url, store.get_plan(db_url, plan_id).job, kind=kind)  # type: ignore[union-attr]
    assert ev.details == {"plan_id": plan_id}


def test_poke_is_done_only_when_every_awaited_step_applied(db_url, plan_id):
    n = store.get_plan(db_url, plan_id).steps  # type: ignore[union-attr]
    sensor = _sensor(plan_id)
    assert sensor.poke({}) is False
    _apply(db_url, plan_id, [1])
    assert _sensor(plan_id, steps=[1]).poke({}) is True  # only step 1 awaited
    assert sensor.poke({}) is (n == 1)
    _apply(db_url, plan_id)
    assert sensor.poke({}) is True


def test_poke_fails_the_plan_on_a_rejected_step(db_url, plan_id):
    _apply(db_url, plan_id, [1], reject="bin 3 is on worker 1, not 0")
    with pytest.raises(AirflowFailException, match="step 1 was rejected: bin 3 is on worker 1, not 0"):
        _sensor(plan_id).poke({})
    assert store.get_plan(db_url, plan_id).status == "failed"  # type: ignore[union-attr]


def test_a_plan_already_checkpointed_returns_at_once_within_its_deadline(db_url, plan_id):
    _apply(db_url, plan_id)
    sensor = _sensor(plan_id)
    assert sensor.execute({}) == plan_id
    assert sensor.timeout == pytest.approx(run_deadline(db_url, plan_id).total_ms / 1000.0)


@pytest.mark.parametrize("empty", ["", "None"])
def test_no_plan_is_nothing_to_wait_for(empty):
    with pytest.raises(AirflowSkipException, match="no plan to wait for"):
        _sensor(empty).execute({})


def test_an_unknown_plan_fails_the_task(db_url, monkeypatch):
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    with pytest.raises(AirflowFailException, match="plan nope is not in the metrics DB"):
        _sensor("nope").poke({})
