"""EmitPlanOperator against a broker that is down when emission starts: it retries with backoff
and emits the plan once the broker is back; a broker that stays down past the plan's deadline
fails the plan with a message that says so, and nothing is recorded as emitted.

The broker is a real one of this test's own (scripts/stack.py KafkaBroker on free ports), stopped
and restarted for real; the reference step applier answers the steps once it is back.
"""

from __future__ import annotations

import threading
import time

import ballast_stack as stack  # loaded by tests/conftest.py (scripts/stack.py)
import pytest
from airflow.sdk.exceptions import AirflowFailException

from ballast import controller, store
from ballast.config import get_job
from ballast.emitter import BOOTSTRAP_TIMEOUT_S, ensure_control_topics
from ballast.tasks import EmitPlanOperator
from tests.helpers.procs import free_port
from tests.helpers.stepapplier import StepApplier, seed_job
from tests.helpers.xdist_groups import OUTAGES

pytestmark = [pytest.mark.controlplane, pytest.mark.faults, pytest.mark.slow, OUTAGES]
# longer than one attempt to reach the broker (which rides out a shorter outage and retries nothing)
DOWN_S = BOOTSTRAP_TIMEOUT_S + 5


@pytest.fixture
def broker(tmp_path, airflow_db):  # type: ignore[no-untyped-def]
    b = stack.KafkaBroker(tmp_path / "kafka-root", free_port(), free_port(), name="kafka-emit-retry")
    try:
        b.up()
    except stack.StackError as exc:
        pytest.fail(f"Kafka broker could not start: {exc}")
    yield b
    b.down()


@pytest.fixture
def planned(broker, db_url, jobs_file, unique_name, monkeypatch):  # type: ignore[no-untyped-def]
    """A stored two-step plan of a seeded job whose control topic exists on the test's broker."""

    def make(margin_s: float) -> str:
        monkeypatch.setenv("BALLAST_DB_URL", db_url)
        monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", broker.bootstrap)
        jobs_file(bins=16, timeout=margin_s)
        seed_job(db_url, unique_name, bins=16)
        ensure_control_topics(broker.bootstrap, unique_name)
        out = controller.plan_manual(db_url, get_job(unique_name), {
            "moves": [{"bin": 3, "to": 1}, {"bin": 12, "to": 1}], "strategy": "fluid", "dry_run": False})
        return out["plan_id"]

    return make


def test_emit_waits_out_a_broker_restart(broker, planned, db_url, unique_name):
    plan_id = planned(margin_s=120)
    broker.down()
    applier = StepApplier(broker.bootstrap, db_url, unique_name)

    def restart() -> None:
        time.sleep(DOWN_S)
        broker.up()
        applier.start()

    th = threading.Thread(target=restart, daemon=True)
    t0 = time.monotonic()
    th.start()
    try:
        out = EmitPlanOperator(task_id="emit", plan_id=plan_id, backoff_cap_s=4.0).execute({})
    finally:
        th.join(timeout=120)
        applier.stop()
    assert time.monotonic() - t0 >= DOWN_S
    assert out["all_emitted"] and out["waiting_for"] == [] and out["failed_step"] is None, out
    retries = [e.message for e in store.events(db_url, unique_name, kind="emit_retry")]
    assert retries and all("broker unreachable" in m and "retrying in" in m for m in retries), \
        "the outage was retried, not failed at once"
    steps = store.plan_steps(db_url, plan_id)
    assert all(s.emitted for s in steps)
    assert [s for _, s, _ in applier.seen] == [1, 2], "each step sent once, in order"
    assert store.get_plan(db_url, plan_id).status not in ("failed", "cancelled")


def test_broker_down_past_the_deadline_fails_the_plan(broker, planned, db_url, unique_name):
    plan_id = planned(margin_s=BOOTSTRAP_TIMEOUT_S + 5)  # room for one retry after the first attempt
    broker.down()
    t0 = time.monotonic()
    with pytest.raises(AirflowFailException, match="stayed unreachable until the plan's deadline"):
        EmitPlanOperator(task_id="emit", plan_id=plan_id, backoff_cap_s=4.0).execute({})
    assert time.monotonic() - t0 < 120
    plan = store.get_plan(db_url, plan_id)
    assert plan.status == "failed" and "unreachable" in plan.reason
    assert not any(s.emitted for s in store.plan_steps(db_url, plan_id))
    assert store.events(db_url, unique_name, kind="plan_timeout")
    assert store.events(db_url, unique_name, kind="emit_retry"), "retried with backoff before giving up"
