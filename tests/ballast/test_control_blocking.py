"""ballast.control.blocking: emit → await → verify in one call ends in a verified plan, or fails the
plan (rejected step, no checkpoint by the deadline) with a PlanFailed that says why; a request
error is raised at once, and an outage is waited out only until the deadline. On a real migrated
SQLite metrics DB; a stand-in emitter plays the broker and the job, except in the one test on the
real broker."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy.exc import DBAPIError, OperationalError, ProgrammingError

from ballast import emitter, store
from ballast.control import manual
from ballast.control.blocking import db_unreachable, run_plan_blocking
from ballast.control.handoffs import Verified
from ballast.control.plan import PlanFailed
from ballast.emitter import EmitError, EmitOutcome
from ballast.protocol import step_from_document
from tests.helpers.stepapplier import apply_step

pytestmark = pytest.mark.controlplane


def test_run_plan_blocking_emits_awaits_and_verifies(db_url, job, kafka_bootstrap):
    from ballast.control.blocking import run_plan_blocking
    from ballast.emitter import ensure_control_topics
    from tests.helpers.stepapplier import StepApplier

    ensure_control_topics(kafka_bootstrap, job.job)
    out = manual.plan_manual(db_url, job, {"target_workers": 2, "strategy": "batched", "dry_run": False})
    applier = StepApplier(kafka_bootstrap, db_url, job.job)
    applier.start()
    try:
        done = run_plan_blocking(db_url, kafka_bootstrap, out["plan_id"], timeout_s=60, poll_s=0.1)
    finally:
        applier.stop()
    assert Verified.from_dict(done).workers == 2 and done["map_version"] == out["steps"]
    assert store.get_plan(db_url, out["plan_id"]).status == "completed"  # type: ignore[union-attr]



class StandIn:
    """ControlEmitter as run_plan_blocking uses it; each emit() answers with `answer(url, plan_id)`."""

    calls: list[tuple[str, str]] = []
    answer: Any = None

    def __init__(self, bootstrap: str, url: str, **_: Any) -> None:
        self.url = url

    def __enter__(self) -> StandIn:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def emit(self, plan_id: str, mode: str = "flow-control") -> EmitOutcome:
        StandIn.calls.append((plan_id, mode))
        return StandIn.answer(self.url, plan_id)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[StandIn]:
    monkeypatch.setattr(emitter, "ControlEmitter", StandIn)
    StandIn.calls, StandIn.answer = [], None
    return StandIn


def _plan(url: str, cfg) -> tuple[str, int]:  # type: ignore[no-untyped-def]
    out = manual.plan_manual(url, cfg, {"target_workers": 2, "strategy": "fluid", "dry_run": False})
    return out["plan_id"], out["steps"]


def test_a_plan_the_job_applies_is_verified(db_url, job, stand_in):
    plan_id, n = _plan(db_url, job)

    def send_all_and_apply(url: str, pid: str) -> EmitOutcome:  # the broker and the job, at once
        for rec in store.plan_steps(url, pid):
            if rec.step not in store.checkpoints(url, pid):
                apply_step(url, job.job, job.operator, step_from_document(rec.payload))
        return EmitOutcome(pid, all_emitted=True)

    stand_in.answer = send_all_and_apply
    done = run_plan_blocking(db_url, "unused:9092", plan_id, timeout_s=30, poll_s=0.01, mode="prepared-ahead")
    assert Verified.from_dict(done).workers == 2 and done["map_version"] == n
    assert stand_in.calls == [(plan_id, "prepared-ahead")]
    assert store.get_plan(db_url, plan_id).status == "completed"  # type: ignore[union-attr]


def test_a_rejected_step_fails_the_plan(db_url, job, stand_in):
    plan_id, _ = _plan(db_url, job)
    stand_in.answer = lambda url, pid: EmitOutcome(pid, failed_step=1, failed_reason="step 1 was rejected: stale")
    with pytest.raises(PlanFailed, match=f"plan {plan_id} failed: step 1 was rejected: stale"):
        run_plan_blocking(db_url, "unused:9092", plan_id, timeout_s=30, poll_s=0.01)
    assert stand_in.calls == [(plan_id, "flow-control")]  # the plan's own emit mode
    assert store.get_plan(db_url, plan_id).status == "failed"  # type: ignore[union-attr]
    assert store.events(db_url, job.job, kind="plan_rejected")


def test_no_checkpoint_by_the_deadline_fails_the_plan_naming_the_steps(db_url, job, stand_in):
    plan_id, n = _plan(db_url, job)
    stand_in.answer = lambda url, pid: EmitOutcome(pid, waiting_for=[1])
    with pytest.raises(PlanFailed, match=re.escape(f"no checkpoint for step(s) {list(range(1, n + 1))} within 0s")):
        run_plan_blocking(db_url, "unused:9092", plan_id, timeout_s=0.0, poll_s=0.01)
    assert store.get_plan(db_url, plan_id).status == "failed"  # type: ignore[union-attr]
    [ev] = store.events(db_url, job.job, kind="plan_timeout")
    assert ev.details == {"plan_id": plan_id}


def test_a_request_error_is_raised_at_once_and_an_outage_past_the_deadline_too(db_url, job, stand_in):
    plan_id, _ = _plan(db_url, job)

    def wrong(url: str, pid: str) -> EmitOutcome:
        raise EmitError("plan is driven by another run")

    stand_in.answer = wrong
    with pytest.raises(EmitError, match="driven by another run"):
        run_plan_blocking(db_url, "unused:9092", plan_id, timeout_s=30, poll_s=0.01)
    assert len(stand_in.calls) == 1  # not retried

    def db_down(url: str, pid: str) -> EmitOutcome:
        raise OperationalError("SELECT 1", {}, Exception("connection refused"))

    def waited(exc: BaseException) -> None:  # stops the loop instead of sleeping on if the deadline is ignored
        raise AssertionError(f"waited out an outage past the deadline: {exc}")

    stand_in.answer = db_down
    with pytest.raises(OperationalError):
        run_plan_blocking(db_url, "unused:9092", plan_id, timeout_s=0.0, poll_s=0.01, on_db_outage=waited)
    assert store.get_plan(db_url, plan_id).is_open  # type: ignore[union-attr]


def test_an_unknown_plan_is_refused_before_anything_is_sent(db_url, stand_in):
    with pytest.raises(PlanFailed, match="plan nope is not in the metrics DB"):
        run_plan_blocking(db_url, "unused:9092", "nope", timeout_s=1)
    assert stand_in.calls == []


def test_only_an_unreachable_db_is_worth_waiting_for() -> None:
    assert db_unreachable(OperationalError("SELECT 1", {}, Exception("could not connect")))
    assert not db_unreachable(ProgrammingError("SELECT nope", {}, Exception("no such column")))
    lost = DBAPIError("SELECT 1", {}, Exception("server closed the connection"), connection_invalidated=True)
    assert db_unreachable(lost) and not db_unreachable(ValueError("bad"))
