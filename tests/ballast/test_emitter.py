"""Emission against the real broker: acks=all, exactly one message per (plan, step), resume, rejection."""

from __future__ import annotations

from datetime import timedelta

import pytest
from kafka import KafkaConsumer, TopicPartition

from ballast import controller, store
from ballast.config import get_job
from ballast.emitter import ControlEmitter, EmitError, ensure_control_topics
from ballast.protocol import control_topic, parse_control
from tests.helpers.stepapplier import StepApplier, seed_job
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.controlplane


def _topic_messages(bootstrap: str, job: str) -> list[tuple[int, dict]]:
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=1500)
    tp = TopicPartition(control_topic(job), 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = [(r.offset, parse_control(r.value).to_dict()) for r in c]
    c.close()
    return out


def _plan(db_url: str, job: str, strategy: str = "fluid", emit_mode: str = "flow-control", gap: float = 0.0) -> str:
    cfg = get_job(job)
    out = controller.plan_manual(db_url, cfg, {"target_workers": 2, "strategy": strategy, "gap_seconds": gap,
                                              "emit_mode": emit_mode, "dry_run": False})
    assert out["steps"] >= 3, out
    return out["plan_id"]


def _emit_each_after_its_checkpoint(em: ControlEmitter, bootstrap: str, db_url: str, job: str, plan_id: str,
                                    n: int) -> None:
    """Step 1 is on the topic: a step applier checkpoints each step, and each emit after a checkpoint
    sends exactly the next step; returns once all n steps are checkpointed."""
    applier = StepApplier(bootstrap, db_url, job)
    applier.start()
    try:
        for k in range(2, n + 1):
            wait_until(lambda: k - 1 in store.checkpoints(db_url, plan_id), 20, "the applier's checkpoints",
                       poll=0.05)
            assert [e.step for e in em.emit(plan_id).emitted] == [k]
        wait_until(lambda: len(store.checkpoints(db_url, plan_id)) == n, 30, "the applier's checkpoints", poll=0.05)
    finally:
        applier.stop()


@pytest.fixture
def job(kafka_bootstrap, db_url, jobs_file, unique_name):  # type: ignore[no-untyped-def]
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    ensure_control_topics(kafka_bootstrap, unique_name)
    return unique_name


def test_producer_waits_for_all_replicas(kafka_bootstrap, db_url):
    with ControlEmitter(kafka_bootstrap, db_url) as em:
        assert em._producer.config["acks"] in (-1, "all")
        assert em._producer.config["enable_idempotence"] is True


def test_flow_control_sends_next_step_only_after_checkpoint_and_never_twice(kafka_bootstrap, db_url, job):
    plan_id = _plan(db_url, job)
    n = len(store.plan_steps(db_url, plan_id))
    with ControlEmitter(kafka_bootstrap, db_url) as em:
        first = em.emit(plan_id)
        assert [e.step for e in first.emitted] == [1] and first.waiting_for == [1]
        again = em.emit(plan_id)  # no checkpoint yet: nothing new, nothing re-sent
        assert again.emitted == [] and again.waiting_for == [1] and again.already_emitted == [1]
        assert len(_topic_messages(kafka_bootstrap, job)) == 1

        _emit_each_after_its_checkpoint(em, kafka_bootstrap, db_url, job, plan_id, n)
        final = em.emit(plan_id)
        assert final.emitted == [] and final.waiting_for == [] and final.all_emitted

    msgs = _topic_messages(kafka_bootstrap, job)
    assert [(d["plan_id"], d["step"]) for _, d in msgs] == [(plan_id, k) for k in range(1, n + 1)]
    steps = store.plan_steps(db_url, plan_id)
    assert [(s.kafka_offset, s.payload["step"]) for s in steps] == [(off, d["step"]) for off, d in msgs]
    # each step is not-before the previous checkpoint and expects the version it leaves behind
    assert [d["map_version"] for _, d in msgs] == list(range(0, n))
    out = controller.verify(db_url, plan_id)
    assert out["workers"] == 2 and store.get_plan(db_url, plan_id).status == "completed"
    assert "applied" in out["summary"] and f"total: {n}/{n} applied" in out["summary"]


def test_interrupted_plan_resumes_at_first_step_without_checkpoint(kafka_bootstrap, db_url, job):
    plan_id = _plan(db_url, job)
    n = len(store.plan_steps(db_url, plan_id))
    k = 2
    applier = StepApplier(kafka_bootstrap, db_url, job)
    applier.start()
    try:
        with ControlEmitter(kafka_bootstrap, db_url) as em:  # the first run, killed after step k
            for i in range(1, k + 1):
                assert [e.step for e in em.emit(plan_id).emitted] == [i]
                wait_until(lambda: i in store.checkpoints(db_url, plan_id), 20, "the applier's checkpoints", poll=0.05)
        # a new process (e.g. a retried task) picks the plan up from the DB alone
        with ControlEmitter(kafka_bootstrap, db_url) as em2:
            sent = []
            while True:
                out = em2.emit(plan_id)
                sent += [e.step for e in out.emitted]
                if not out.waiting_for:
                    break
                wait_until(lambda: out.waiting_for[0] in store.checkpoints(db_url, plan_id), 20,
                           "the applier's checkpoints", poll=0.05)
        assert sent == list(range(k + 1, n + 1))
    finally:
        applier.stop()
    seen = [(p, s) for p, s, _ in applier.seen]
    assert seen == [(plan_id, i) for i in range(1, n + 1)], "a step was emitted twice or skipped"
    controller.verify(db_url, plan_id)


def test_prepared_ahead_sends_all_steps_with_spaced_effective_times(kafka_bootstrap, db_url, job):
    plan_id = _plan(db_url, job, emit_mode="prepared-ahead", gap=0.5)
    n = len(store.plan_steps(db_url, plan_id))
    with ControlEmitter(kafka_bootstrap, db_url) as em:
        out = em.emit(plan_id, "prepared-ahead")
        assert [e.step for e in out.emitted] == list(range(1, n + 1)) and out.all_emitted
        effs = [e.effective_at for e in out.emitted]
        assert all(b - a == timedelta(seconds=0.5) for a, b in zip(effs, effs[1:]))
        assert em.emit(plan_id, "prepared-ahead").emitted == []  # re-run: idempotent
    applier = StepApplier(kafka_bootstrap, db_url, job)
    applier.start()
    try:
        wait_until(lambda: len(store.checkpoints(db_url, plan_id)) == n, 20, "the applier's checkpoints", poll=0.05)
    finally:
        applier.stop()
    assert len(_topic_messages(kafka_bootstrap, job)) == n
    # the applier honoured "not before": step i applied no earlier than its effective time
    for s in store.plan_steps(db_url, plan_id):
        assert applier.applied_at[(plan_id, s.step)] >= s.effective_at
    controller.verify(db_url, plan_id)


def test_rejected_step_fails_the_plan_with_its_reason(kafka_bootstrap, db_url, job):
    plan_id = _plan(db_url, job)
    applier = StepApplier(kafka_bootstrap, db_url, job, reject={2: "bin 3 is on worker 1, not 0"})
    applier.start()
    try:
        with ControlEmitter(kafka_bootstrap, db_url) as em:
            em.emit(plan_id)
            wait_until(lambda: 1 in store.checkpoints(db_url, plan_id), 20, "the applier's checkpoints", poll=0.05)
            em.emit(plan_id)
            wait_until(lambda: 2 in store.checkpoints(db_url, plan_id), 20, "the applier's checkpoints", poll=0.05)
            out = em.emit(plan_id)
            assert out.failed_step == 2 and "bin 3 is on worker 1" in out.failed_reason and out.emitted == []
    finally:
        applier.stop()
    with pytest.raises(controller.PlanFailed, match="step 2 was rejected: bin 3 is on worker 1"):
        controller.verify(db_url, plan_id)
    assert store.get_plan(db_url, plan_id).status == "failed"
    ev = store.events(db_url, job, kind="plan_rejected")
    assert ev and "no further step will be emitted" in ev[0].message
    with ControlEmitter(kafka_bootstrap, db_url) as em, pytest.raises(EmitError, match="already failed"):
        em.emit(plan_id)
    assert len(_topic_messages(kafka_bootstrap, job)) == 2


def test_send_puts_one_signed_step_on_the_control_topic_without_a_plan(kafka_bootstrap, db_url, job):
    """`send` (what the benchmarks use: no plan in the metrics DB) signs like `emit` does."""
    import json
    from datetime import UTC, datetime

    from ballast.protocol import ControlStep, Move
    from ballast.signing import Keyring, SigningKey

    now = datetime.now(UTC)
    step = ControlStep(job, "keycount", "bench-1", 1, 1, "moves", (Move(0, 0, 1),), 2, 0, now, now)
    with ControlEmitter(kafka_bootstrap, db_url, signing_key=SigningKey("k1", b"s" * 32)) as em:
        partition, offset = em.send(step)
    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, consumer_timeout_ms=1500)
    tp = TopicPartition(control_topic(job), 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    [rec] = list(c)
    c.close()
    assert (partition, offset) == (0, rec.offset) and parse_control(rec.value) == step
    assert Keyring({"k1": b"s" * 32}).authenticate(json.loads(rec.value)) == "k1"


@pytest.mark.parametrize("status", ["awaiting_approval", "cancelled"])
def test_a_plan_awaiting_approval_or_cancelled_is_not_emitted(kafka_bootstrap, db_url, job, status):
    plan_id = _plan(db_url, job)
    store.set_plan_status(db_url, plan_id, status)
    with ControlEmitter(kafka_bootstrap, db_url) as em, pytest.raises(EmitError, match="approval|cancelled"):
        em.emit(plan_id)
    assert _topic_messages(kafka_bootstrap, job) == []  # nothing reached the control topic
    assert all(s.emitted_at is None for s in store.plan_steps(db_url, plan_id))


def test_flow_control_makes_each_next_step_effective_a_gap_after_the_previous_checkpoint(kafka_bootstrap, db_url,
                                                                                          job):
    """With gap_seconds 2, step k+1's effective_at is at least step k's checkpoint completed_at + 2 s."""
    from datetime import datetime

    plan_id = _plan(db_url, job, gap=2.0)
    n = len(store.plan_steps(db_url, plan_id))
    with ControlEmitter(kafka_bootstrap, db_url) as em:
        em.emit(plan_id)
        _emit_each_after_its_checkpoint(em, kafka_bootstrap, db_url, job, plan_id, n)
    cps = store.checkpoints(db_url, plan_id)
    effective = {d["step"]: datetime.fromisoformat(d["effective_at"].replace("Z", "+00:00"))
                 for _, d in _topic_messages(kafka_bootstrap, job)}
    for k in range(2, n + 1):
        assert effective[k] >= cps[k - 1].completed_at + timedelta(seconds=2.0), (k, effective[k], cps[k - 1])
