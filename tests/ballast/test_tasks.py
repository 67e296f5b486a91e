"""ballast.tasks: EmitPlanOperator sends only an approved plan, retries a broker that does not answer
with capped exponential backoff until the plan's deadline (then fails the plan, nothing recorded as
emitted), fails a wrong request or a rejected step at once, and defers for a step still in flight;
PlanApprovalOperator records who answered whatever the answer. Fast: a stand-in ControlEmitter for
the broker, a real migrated SQLite metrics DB found through the hooks' environment fallbacks (the
real broker restart: tests/system/test_emit_broker_retry.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, TaskDeferred
from kafka.errors import KafkaConnectionError, KafkaTimeoutError

from ballast import store, tasks
from ballast.config import get_job
from ballast.control import manual
from ballast.emitter import EmitError, EmitOutcome
from ballast.tasks import EmitPlanOperator, PlanApprovalOperator, backoff_s, broker_unreachable
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane
NO_CONN = "t_tasks_no_connection"  # no such connection: the hooks fall back to the environment


def test_backoff_doubles_up_to_the_cap():
    assert [backoff_s(i, 1.0, 8.0) for i in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]



def test_backoff_starts_at_the_base_and_never_passes_the_cap() -> None:
    assert backoff_s(-3) == backoff_s(0) == 1.0
    assert backoff_s(2, base_s=0.5, cap_s=100.0) == 2.0 and backoff_s(60) == 30.0


def test_only_a_broker_that_did_not_answer_is_worth_retrying() -> None:
    assert broker_unreachable(EmitError("no ack", transient=True))
    for cause, retry in ((KafkaTimeoutError("no bootstrap"), True), (KafkaConnectionError("refused"), True),
                         (ValueError("bad"), False), (None, False)):
        exc = EmitError("producer failed")
        exc.__cause__ = cause
        assert broker_unreachable(exc) is retry, cause


class StandIn:
    """ControlEmitter as the operator uses it: `opening` raises on entry (one per attempt, then it
    opens), each emit() returns the next outcome."""

    opening: list[BaseException] = []
    outcomes: list[EmitOutcome] = []
    made: list[StandIn] = []

    def __init__(self, bootstrap: str, url: str, **kw: Any) -> None:
        self.bootstrap, self.kw = bootstrap, kw
        StandIn.made.append(self)

    def __enter__(self) -> StandIn:
        if StandIn.opening:
            raise StandIn.opening.pop(0)
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def emit(self, plan_id: str, mode: str = "flow-control") -> EmitOutcome:
        return StandIn.outcomes.pop(0)


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> type[StandIn]:
    monkeypatch.setattr(tasks, "ControlEmitter", StandIn)
    StandIn.opening, StandIn.outcomes, StandIn.made = [], [], []
    return StandIn


@pytest.fixture
def plan_id(db_url, jobs_file, unique_name, monkeypatch):  # type: ignore[no-untyped-def]
    """A stored plan of a seeded job; the hooks find its DB and a broker address in the environment."""
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", "broker.invalid:9092")
    monkeypatch.delenv("BALLAST_CONTROL_SIGNING_KEY", raising=False)
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    return manual.plan_manual(db_url, get_job(unique_name), {"target_workers": 2, "strategy": "fluid",
                                                             "dry_run": False})["plan_id"]


def _op(plan_id: str, **kw: Any) -> EmitPlanOperator:
    return EmitPlanOperator(task_id="emit", plan_id=plan_id, kafka_conn_id=NO_CONN, db_conn_id=NO_CONN,
                            signing_conn_id=NO_CONN, **kw)


@pytest.mark.parametrize("empty", ["", "None"])
def test_no_plan_is_nothing_to_emit(empty: str) -> None:
    with pytest.raises(AirflowSkipException, match="no plan to emit"):
        _op(empty).execute({})


@pytest.mark.parametrize("status", ["awaiting_approval", "cancelled"])
def test_only_an_approved_plan_is_emitted(db_url, plan_id, stand_in, status):
    store.set_plan_status(db_url, plan_id, status)
    with pytest.raises(AirflowFailException, match=f"plan {plan_id} is {status}: only an approved plan is emitted"):
        _op(plan_id).execute({})
    assert stand_in.made == []  # the broker was never asked


def test_a_broker_that_comes_back_is_retried_with_backoff_and_the_wait_recorded(db_url, plan_id, stand_in):
    no_bootstrap = EmitError("no bootstrap")  # the producer's constructor: retriable, but not flagged
    no_bootstrap.__cause__ = KafkaTimeoutError("no bootstrap")
    stand_in.opening = [EmitError("broker down", transient=True), no_bootstrap]
    stand_in.outcomes = [EmitOutcome(plan_id, all_emitted=True)]
    out = _op(plan_id, mode="prepared-ahead", backoff_base_s=0.01).execute({})
    assert out["all_emitted"] and out["plan_id"] == plan_id and len(stand_in.made) == 3
    assert stand_in.made[0].bootstrap == "broker.invalid:9092"
    retries = store.events(db_url, store.get_plan(db_url, plan_id).job, kind="emit_retry")  # type: ignore[union-attr]
    assert [e.message.split(";")[0] for e in retries] == [
        f"plan {plan_id}: broker unreachable (attempt 2: no bootstrap)",
        f"plan {plan_id}: broker unreachable (attempt 1: broker down)"]


def test_a_broker_down_past_the_deadline_fails_the_plan(db_url, plan_id, stand_in):
    stand_in.opening = [EmitError("broker down", transient=True)]
    with pytest.raises(AirflowFailException, match="the Kafka broker stayed unreachable until the plan's deadline"):
        _op(plan_id, backoff_base_s=1e6, backoff_cap_s=1e6).execute({})  # the first wait would pass it
    plan = store.get_plan(db_url, plan_id)
    assert plan is not None and plan.status == "failed"
    assert store.events(db_url, plan.job, kind="plan_timeout")
    assert not any(s.emitted for s in store.plan_steps(db_url, plan_id))


def test_a_wrong_request_fails_the_task_at_once_and_leaves_the_plan(db_url, plan_id, stand_in):
    stand_in.opening = [EmitError(f"plan {plan_id} is driven by ballast_migrate/manual__1")]
    with pytest.raises(AirflowFailException, match="is driven by ballast_migrate/manual__1"):
        _op(plan_id).execute({})
    assert len(stand_in.made) == 1 and store.get_plan(db_url, plan_id).is_open  # type: ignore[union-attr]


def test_a_rejected_step_fails_the_plan(db_url, plan_id, stand_in):
    stand_in.outcomes = [EmitOutcome(plan_id, failed_step=1, failed_reason="step 1 was rejected: stale map")]
    with pytest.raises(AirflowFailException, match=f"plan {plan_id} failed: step 1 was rejected: stale map"):
        _op(plan_id).execute({})
    assert store.get_plan(db_url, plan_id).status == "failed"  # type: ignore[union-attr]


def test_a_step_still_in_flight_defers_to_the_trigger_and_resumes_from_it(db_url, plan_id, stand_in):
    stand_in.outcomes = [EmitOutcome(plan_id, waiting_for=[1])]
    op = _op(plan_id, inline_wait_s=0.05, poll_interval=0.01)
    with pytest.raises(TaskDeferred) as deferred:
        op.execute({})
    trigger = deferred.value.trigger
    assert deferred.value.method_name == "resume" and trigger.plan_id == plan_id and trigger.steps == [1]
    assert trigger.db_conn_id == NO_CONN and datetime.fromisoformat(trigger.deadline) > datetime.now(UTC)
    stand_in.outcomes = [EmitOutcome(plan_id, all_emitted=True)]
    done = op.resume({}, {"status": "done", "plan_id": plan_id, "steps": [1], "deadline": trigger.deadline})
    assert done["all_emitted"]


class FakeTI:
    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


@pytest.mark.parametrize("choice, user, timed_out", [("Approve", {"id": "1", "name": "ada"}, False),
                                                     ("Reject", {"id": "2", "name": "bob"}, False),
                                                     ("Reject", None, True)])
def test_the_approval_answer_is_recorded_whatever_it_is(choice, user, timed_out):
    op = PlanApprovalOperator(task_id="approve", subject="Plan p")
    ti = FakeTI()
    ret = op.execute_complete({"ti": ti, "task": op}, {"chosen_options": [choice], "params_input": {},
                                                       "responded_at": datetime.now(UTC), "responded_by_user": user,
                                                       "timedout": timed_out})
    assert ret["chosen_options"] == [choice]
    assert ti.pushed == {"answer": {"choice": choice, "by": user["name"] if user else None, "timed_out": timed_out}}


def test_an_approval_that_failed_records_no_answer():
    ti = FakeTI()
    with pytest.raises(Exception, match="timeout"):
        PlanApprovalOperator(task_id="approve", subject="Plan p").execute_complete(
            {"ti": ti}, {"error": "no answer", "error_type": "timeout"})
    assert ti.pushed == {}
