"""ballast.control.plan: a plan is built from the planner's steps only if they compose to the target
map, and stored with every step's control message in one transaction, owned by this run; the
operator is then held (a second plan is a PlanConflict naming the first); each bin moves by the
mode the cost model and the job row's declared window choose, and each stored step carries its
flag. On a real migrated SQLite metrics DB."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest

from ballast import policy, store
from ballast.bin_maps import split_assignment
from ballast.control import collect, place, plan
from ballast.control.handoffs import Snapshot
from ballast.protocol import MAX_PLAN_ID_CHARS, step_from_document

pytestmark = pytest.mark.controlplane


def _snap(url: str, cfg) -> Snapshot:  # type: ignore[no-untyped-def]
    snap = collect.collect(url, cfg)
    assert isinstance(snap, Snapshot)
    return snap


def test_plan_builds_composing_steps_and_stores_them_owned_by_this_run(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    target = place.place(snap.map.assignment, snap.bins, 2).assignment
    model = plan.cost_model(db_url, job)
    req = plan.PlanRequest(strategy="fluid")
    built = plan.build_plan(snap.map, snap.bins, target, 2, req, model)
    assert len(built.steps) == sum(1 for a, b in zip(snap.map.assignment, target) if a != b)
    stored = plan.store_plan(db_url, job, snap.map, target, built, req, model)
    rec = store.get_plan(db_url, stored.plan_id)
    assert rec is not None and rec.owner == store.current_owner() and rec.status == "planned"
    assert [s.step for s in store.plan_steps(db_url, stored.plan_id)] == list(range(1, stored.steps + 1))
    with pytest.raises(store.PlanConflict, match=stored.plan_id):  # the operator is held now
        plan.store_plan(db_url, job, snap.map, target, built, req, model)



def test_each_stored_step_is_the_control_message_the_job_will_read(db_url, job):
    snap = _snap(db_url, job)
    target = place.place(snap.map.assignment, snap.bins, 2).assignment
    model = plan.cost_model(db_url, job)
    assert model.samples == 0  # no applied checkpoint yet: the defaults
    decision = store.save_decision(db_url, job.job, job.operator, current_workers=1, proposed_workers=2,
                                  target_workers=2, action="scale_up", reason="r", inputs={})
    req = plan.PlanRequest(strategy="batched", step_size=2, gap_seconds=1.5, emit_mode="prepared-ahead",
                           reason="x" * 600, decision_id=decision)
    built = plan.build_plan(snap.map, snap.bins, target, 2, req, model)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    stored = plan.store_plan(db_url, job, snap.map, target, built, req, model, now=now)
    steps = [step_from_document(s.payload) for s in store.plan_steps(db_url, stored.plan_id)]
    assert [(s.step, s.steps, s.map_version) for s in steps] == [(k, stored.steps, k - 1)
                                                                 for k in range(1, stored.steps + 1)]
    assert all(s.plan_id == stored.plan_id and s.job == job.job and s.issued_at == now for s in steps)
    assert [s.effective_at - now for s in steps] == [timedelta(seconds=1.5 * k) for k in range(stored.steps)]
    assert steps[-1].workers == 2 and all(len(s.moves) <= 2 for s in steps) and len(steps[0].reason) == 500
    rec = store.get_plan(db_url, stored.plan_id)
    assert rec is not None and rec.target_assignment == target and rec.source_map_version == 0
    assert rec.params["emit_mode"] == "prepared-ahead" and rec.params["decision_id"] == decision
    assert stored.emit_mode == "prepared-ahead" and stored.predicted_ms is not None
    assert store.latest_decision(db_url, job.job, job.operator).plan_id == stored.plan_id  # type: ignore[union-attr]
    [ev] = store.events(db_url, job.job, kind="plan")
    assert ev.details == {"plan_id": stored.plan_id} and f"{stored.steps} step(s)" in ev.message


def test_steps_that_do_not_compose_to_the_target_are_never_stored(db_url, job, monkeypatch):
    snap = _snap(db_url, job)
    target = place.place(snap.map.assignment, snap.bins, 2).assignment
    real = policy.plan_migration

    def losing_a_step(*args, **kwargs):  # type: ignore[no-untyped-def]
        p = real(*args, **kwargs)
        return dataclasses.replace(p, steps=p.steps[:-1])

    monkeypatch.setattr(policy, "plan_migration", losing_a_step)
    model = plan.cost_model(db_url, job)
    with pytest.raises(plan.PlanFailed, match="do not compose to the target map; nothing stored"):
        plan.build_plan(snap.map, snap.bins, target, 2, plan.PlanRequest(strategy="fluid"), model)
    assert store.open_plans(db_url, job.job, job.operator) == []


def test_a_split_is_one_step_to_the_finer_map_that_moves_nothing(db_url, job):
    snap = _snap(db_url, job)
    stored = plan.store_split(db_url, job, snap.map, 64, plan.PlanRequest(strategy="all-at-once"))
    assert (stored.steps, stored.bins, stored.bytes) == (1, 0, 0)
    [s] = store.plan_steps(db_url, stored.plan_id)
    msg = step_from_document(s.payload)
    assert (msg.kind, msg.bins, msg.moves, msg.workers, msg.map_version) == ("split", 64, (), 1, 0)
    rec = store.get_plan(db_url, stored.plan_id)
    assert rec is not None and list(rec.target_assignment) == split_assignment(snap.map.assignment, 64)


def test_plan_ids_are_unique_bounded_and_name_the_job() -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    a, b = plan.new_plan_id("clicks", at), plan.new_plan_id("clicks", at)
    assert a != b and a.startswith("clicks-20260304T050607-")
    long = plan.new_plan_id("j" * 200, at)
    assert len(long) <= MAX_PLAN_ID_CHARS and long.startswith("j" * 60 + "-")


def test_each_bin_moves_by_its_mode_and_every_stored_step_carries_its_flag(db_url, jobs_file, unique_name):
    from ballast.config import get_job
    from ballast.policy.handover import WindowSpec
    from ballast.protocol import parse_control
    from ballast.store import writer
    from tests.helpers.stepapplier import seed_job

    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2)
    cfg = get_job(unique_name)
    snap = _snap(db_url, cfg)
    assert plan.declared_window(db_url, cfg) is None, "the seeded job row declares no window"
    big = dataclasses.replace(snap.bins, bytes=tuple([1_000] * 8 + [600_000_000] * 8))  # 50 ms vs 6 s by transfer
    swap = [1 - w for w in snap.map.assignment]  # every bin to the other worker: W stays 2
    req = plan.PlanRequest(strategy="all-at-once", source="manual")
    model = plan.cost_model(db_url, cfg)
    plain = plan.build_plan(snap.map, big, swap, 2, req, model, plan.declared_window(db_url, cfg))
    assert [(s.mode, sorted(m.bin for m in s.moves)) for s in plain.steps] == [
        ("transfer", list(range(8))), ("precopy", list(range(8, 16)))]
    writer.ensure_job_row(db_url, unique_name, "keycount", 16, {"window": {"length_ms": 10_000, "slide_ms": None,
                                                                           "lateness_ms": 20_000}},
                          datetime.now(UTC))  # what a windowed processor's start writes (spark_jobs.binding)
    window = plan.declared_window(db_url, cfg)
    assert window == policy.DeclaredWindow(WindowSpec(10_000), 20_000)
    built = plan.build_plan(snap.map, big, swap, 2, req, model, window)
    assert [s.mode for s in built.steps] == ["transfer", "handover"] and built.steps[1].bytes == 0
    stored = plan.store_plan(db_url, cfg, snap.map, swap, built, req, model)
    sent = [parse_control(json.dumps(s.payload)) for s in store.plan_steps(db_url, stored.plan_id)]
    assert [(s.precopy, s.handover) for s in sent] == [(False, False), (False, True)]
    assert "handover" not in store.plan_steps(db_url, stored.plan_id)[0].payload, "a transfer sends no flag"
    params = store.get_plan(db_url, stored.plan_id).params  # type: ignore[union-attr]
    assert params["move_mode"] == "auto" and params["step_budget_s"] == 60.0
    rows = {r["bin"]: r for r in params["move_modes"]}
    assert sorted(rows) == list(range(16)) and rows[9]["mode"] == "handover" and rows[0]["mode"] == "transfer"
    assert "estimated" in rows[9]["reason"] and "within the 200 ms pause budget" in rows[0]["reason"]
