"""Plan owners and real step claims across the controller and the emitter, on SQLite and PostgreSQL:
a live run's plan is never resumed by another, a gone run's only explicitly; two emitters drive
one plan against the real broker (the step claim decides) and the control topic is read back to
count what was sent, and in what order. (The store's own rules: tests/store/test_plans.py.)
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from sqlalchemy import update

from ballast import controller, store
from ballast.config import get_job
from ballast.emitter import ControlEmitter, EmitError, ensure_control_topics
from ballast.protocol import control_topic, parse_control
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers import dialects
from tests.helpers.race import together as _together
from tests.helpers.stepapplier import StepApplier, seed_job

pytestmark = pytest.mark.controlplane


any_db = dialects.any_db  # a fresh migrated metrics DB, on SQLite then on PostgreSQL


def _record(job: str, plan_id: str, owner: str, status: str = "planned") -> store.PlanRecord:
    return store.PlanRecord(plan_id, job, "keycount", datetime.now(UTC), "fluid", status, 0, 1, 2,
                           (0, 1), 1, {}, None, "test", None, owner)


def _make_stale(url: str, plan_id: str) -> None:
    old = datetime.now(UTC) - timedelta(seconds=store.OWNER_LEASE_S + 60)
    with session_scope(url) as s:
        s.execute(update(m.Plan).where(m.Plan.plan_id == plan_id).values(owner_seen_at=old, created_at=old))


def _topic_steps(bootstrap: str, job: str) -> list[tuple[str, int]]:
    """(plan, step) of every record on the job's control topic (one partition), in offset order:
    the order the data plane reads them in."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1500)
    tp = TopicPartition(control_topic(job), 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    records = sorted((r.offset, parse_control(r.value)) for r in c)
    c.close()
    return [(msg.plan_id, msg.step) for _, msg in records]


@pytest.mark.parametrize("mode", ["prepared-ahead", "flow-control"])
def test_two_emitters_racing_on_one_plan_send_each_step_once(any_db, kafka_bootstrap, jobs_file, unique_name,
                                                             mode):
    jobs_file(bins=16)
    seed_job(any_db, unique_name, bins=16)
    ensure_control_topics(kafka_bootstrap, unique_name)
    out = controller.plan_manual(any_db, get_job(unique_name), {"target_workers": 2, "strategy": "fluid",
                                                                "emit_mode": mode, "dry_run": False})
    plan_id, n = out["plan_id"], out["steps"]
    assert n >= 3
    applier = StepApplier(kafka_bootstrap, any_db, unique_name)
    applier.start()

    def drive() -> int:
        sent = 0
        with ControlEmitter(kafka_bootstrap, any_db) as em:  # same run, two emitters (a zombie and a retry)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                o = em.emit(plan_id, mode)  # type: ignore[arg-type]
                sent += len(o.emitted)
                if o.all_emitted and len(store.checkpoints(any_db, plan_id)) == n:
                    return sent
                time.sleep(0.05)
        raise AssertionError("plan did not complete in 60 s")

    try:
        res = _together(drive, drive)
    finally:
        applier.stop()
    assert all(isinstance(r, int) for r in res), res
    assert sum(res) == n  # between them, each step was sent by exactly one emitter
    sent = _topic_steps(kafka_bootstrap, unique_name)
    assert sent == [(plan_id, k) for k in range(1, n + 1)]  # exactly once on the topic, in step order
    assert len({s.claimed_by for s in store.plan_steps(any_db, plan_id)}) >= 1
    assert controller.verify(any_db, plan_id)["workers"] == 2


def test_a_prepared_ahead_emitter_stops_at_a_step_another_emitter_is_sending(any_db, kafka_bootstrap, jobs_file,
                                                                           unique_name):
    """The race above made certain: emitter A has claimed step 1 and is still sending it when B
    starts. B must send nothing (steps 2.. from B would reach the topic before A's step 1); A then
    sends every step, and the topic holds them in order."""
    jobs_file(bins=16)
    seed_job(any_db, unique_name, bins=16)
    ensure_control_topics(kafka_bootstrap, unique_name)
    out = controller.plan_manual(any_db, get_job(unique_name), {"target_workers": 2, "strategy": "fluid",
                                                                "emit_mode": "prepared-ahead", "dry_run": False})
    plan_id, n = out["plan_id"], out["steps"]
    assert n >= 3
    sending, go = threading.Event(), threading.Event()
    with ControlEmitter(kafka_bootstrap, any_db) as a, ControlEmitter(kafka_bootstrap, any_db) as b:
        real_send = a.send

        def slow_send(step):  # type: ignore[no-untyped-def]  # a broker slow to acknowledge step 1
            if step.step == 1:
                sending.set()
                assert go.wait(30)
            return real_send(step)

        a.send = slow_send  # type: ignore[method-assign]
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.append(a.emit(plan_id, "prepared-ahead")))
        t.start()
        try:
            assert sending.wait(30), "emitter A never reached step 1"
            met = b.emit(plan_id, "prepared-ahead")
        finally:
            go.set()
            t.join(60)
    assert met.emitted == [] and not met.all_emitted  # B met A's claim on step 1 and stopped there
    assert got and [e.step for e in got[0].emitted] == list(range(1, n + 1))
    assert _topic_steps(kafka_bootstrap, unique_name) == [(plan_id, k) for k in range(1, n + 1)]


def test_rebalance_skips_a_plan_a_live_manual_run_drives(any_db, kafka_bootstrap, jobs_file, unique_name):
    jobs_file(bins=16)
    seed_job(any_db, unique_name, bins=16)
    cfg = get_job(unique_name)
    store.save_plan(any_db, _record(unique_name, "manual-1", "ballast_migrate/manual__1"), [])
    with pytest.raises(controller.NotReady) as err:
        controller.collect(any_db, cfg, owner="ballast_rebalance/scheduled__2")
    msg = str(err.value)
    assert "manual-1" in msg and "ballast_migrate/manual__1" in msg and "planned" in msg and "alive" in msg
    # nor does another run's emitter drive it
    with pytest.raises(EmitError, match="driven by ballast_migrate/manual__1"):
        with ControlEmitter(kafka_bootstrap, any_db, owner="ballast_rebalance/scheduled__2") as em:
            em.emit("manual-1")
    # gone (lease lapsed), it is still a person's plan: the rebalance does not take it over
    _make_stale(any_db, "manual-1")
    with pytest.raises(controller.NotReady, match="not seen for over"):
        controller.collect(any_db, cfg, owner="ballast_rebalance/scheduled__2")
    assert store.get_plan(any_db, "manual-1").owner == "ballast_migrate/manual__1"  # type: ignore[union-attr]


def test_a_gone_runs_plan_is_taken_over_only_explicitly(any_db, jobs_file, unique_name):
    jobs_file(bins=16)
    seed_job(any_db, unique_name, bins=16)
    cfg = get_job(unique_name)
    # an earlier rebalance run's plan, owner alive: the next run skips
    store.save_plan(any_db, _record(unique_name, "rb-1", "ballast_rebalance/scheduled__1"), [])
    with pytest.raises(controller.NotReady, match="rb-1"):
        controller.collect(any_db, cfg, owner="ballast_rebalance/scheduled__2")
    # that run is gone: its own DAG's next run takes it over, recorded, and resumes it
    _make_stale(any_db, "rb-1")
    snap = controller.collect(any_db, cfg, owner="ballast_rebalance/scheduled__2")
    assert snap["status"] == "resume" and snap["plan_id"] == "rb-1" and "takes it over" in snap["reason"]
    assert store.get_plan(any_db, "rb-1").owner == "ballast_rebalance/scheduled__2"  # type: ignore[union-attr]
    assert store.events(any_db, unique_name, kind="plan_taken_over")
    store.set_plan_status(any_db, "rb-1", "failed", finished=True)
    # a manual plan of a gone run: a person takes it over through ballast_migrate's take_over
    store.save_plan(any_db, _record(unique_name, "man-1", "ballast_migrate/manual__1"), [])
    with pytest.raises(controller.InvalidRequest, match="seen 0s ago"):  # its owner is alive: refused
        controller.plan_manual(any_db, cfg, {"take_over": "man-1"})
    _make_stale(any_db, "man-1")
    with pytest.raises(controller.InvalidRequest, match="man-1"):  # a new plan is still refused
        controller.plan_manual(any_db, cfg, {"target_workers": 2, "dry_run": False})
    out = controller.plan_manual(any_db, cfg, {"take_over": "man-1"})
    assert out["plan_id"] == "man-1" and out["taken_over"] and "taken over from ballast_migrate/manual__1" in out[
        "rendered"]
    assert store.get_plan(any_db, "man-1").owner == store.current_owner()  # type: ignore[union-attr]


def test_an_emitter_started_on_a_shells_plan_takes_it_over_recorded(any_db, kafka_bootstrap, unique_name):
    """A retried process (a new pid) resumes a shell's plan by its id; a live Airflow run's it may not."""
    ensure_control_topics(kafka_bootstrap, unique_name)
    store.save_plan(any_db, _record(unique_name, "cli-1", "cli:elsewhere:4242"), [])
    with ControlEmitter(kafka_bootstrap, any_db, owner="cli:here:1") as em:
        em.emit("cli-1")
    assert store.get_plan(any_db, "cli-1").owner == "cli:here:1"  # type: ignore[union-attr]
    (ev,) = store.events(any_db, unique_name, kind="plan_taken_over")
    assert "from cli:elsewhere:4242 by cli:here:1" in ev.message
