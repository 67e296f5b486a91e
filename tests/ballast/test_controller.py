"""ballast.controller: the stages chain through XCom dicts (collect → evaluate → plan_rebalance), and
controller.evaluate on real DB rows: decisions stay valid JSON when DS2 has no finite answer; a
scheduled plan moves each bin by the mode the cost model chooses."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ballast import controller, store
from ballast.config import load_jobs
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane


def test_orchestrator_chains_the_stages_through_xcom_dicts(db_url, job):
    snap = json.loads(json.dumps(controller.collect(db_url, job), allow_nan=False))
    decision = json.loads(json.dumps(controller.evaluate(db_url, job, snap), allow_nan=False))
    assert decision["action"] == "scale_up" and decision["target_workers"] >= 2
    out = controller.plan_rebalance(db_url, job, snap, decision)
    assert out is not None
    assert store.get_plan(db_url, out["plan_id"]).target_workers == decision["target_workers"]  # type: ignore[union-attr]
    again = controller.collect(db_url, job)  # this run owns the open plan: it resumes it
    assert again == {"status": "resume", "plan_id": out["plan_id"], "reason": again["reason"]}
    assert controller.plan_rebalance(db_url, job, snap, {**decision, "action": "no_change"}) is None


def test_overhead_filling_the_budget_gives_a_json_safe_decision(db_url, jobs_file, unique_name):
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    with session_scope(db_url) as s:  # every batch spends 5 s outside the workers: > the 1 s budget
        for row in s.query(m.EpochMetrics).filter_by(job=unique_name):
            row.batch_ms = 5000.0
    cfg = load_jobs()[unique_name]
    out = controller.evaluate(db_url, cfg, controller.collect(db_url, cfg))
    json.dumps(out, allow_nan=False)  # XCom rejects inf/nan
    d = store.latest_decision(db_url, unique_name, "keycount")
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
    d = store.latest_decision(db_url, unique_name, "keycount")
    assert out["action"] == "no_change" and d.target_workers == 1
    assert "outside the operators" in d.reason and d.inputs["diagnosis"]


def test_a_hot_bin_gets_a_split_plan_and_the_next_window_counts_only_the_new_bins(db_url, jobs_file, unique_name):
    """At equal W a bin above a worker's fair share (by more than skew_threshold) is split first:
    a one-step plan, kind split, nothing moves. Once the job runs at the new count, the bin
    statistics use only epochs numbered at that count (older rows number bins at 16)."""
    from ballast.bin_maps import split_assignment
    from ballast.store import writer

    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2, input_rate=10000.0, per_worker_rate=10000.0, epochs=5)
    with session_scope(db_url) as s:  # bin 3 carries 80 % of every epoch's records
        for row in s.query(m.BinMetrics).filter_by(job=unique_name):
            row.records = 8000 if row.bin == 3 else 133
    cfg = load_jobs()[unique_name]
    snap = controller.collect(db_url, cfg)
    out = controller.evaluate(db_url, cfg, snap)
    assert out["action"] == "split" and out["target_bins"] == 64, out["reason"]
    assert "split 16 -> 64 bins" in out["reason"]
    stored = controller.plan_rebalance(db_url, cfg, snap, out)
    assert stored is not None and stored["steps"] == 1 and stored["bins"] == 0
    [step] = store.plan_steps(db_url, stored["plan_id"])
    msg = step.payload
    assert msg["kind"] == "split" and msg["bins"] == 64 and msg["moves"] == [] and msg["workers"] == 2
    plan = store.get_plan(db_url, stored["plan_id"])
    old = [b * 2 // 16 for b in range(16)]
    assert list(plan.target_assignment) == split_assignment(old, 64)
    # the job applies it at epoch 6 and runs three epochs at 64 bins
    new = split_assignment(old, 64)
    now = datetime.now(UTC)
    for e in (6, 7, 8):
        with writer.epoch_transaction(db_url) as s:
            writer.ensure_routing_map(s, unique_name, "keycount", 1, 6, 2, new, now, stored["plan_id"], 1)
            erow = m.EpochMetrics(job=unique_name, operator="keycount", epoch=e, map_version=1, workers=2,
                                  input_rows=6400, batch_ms=500.0, input_rate=10000.0, backlog=0, started_at=now,
                                  ended_at=now)
            brows = [{"job": unique_name, "operator": "keycount", "epoch": e, "bin": b, "worker": new[b],
                      "records": 100, "state_keys": 10, "state_bytes": 1000} for b in range(64)]
            writer.replace_epoch_metrics(s, unique_name, "keycount", e, erow, [], brows)
    assert store.JobStore(db_url, unique_name, "keycount").bin_stats(64, 10).load == tuple([300.0] * 64)


def test_a_scheduled_rebalance_moves_each_bin_by_its_mode(db_url, job):
    from ballast.store import writer

    writer.ensure_job_row(db_url, job.job, job.operator, 16, {"window": {"length_ms": 10_000, "lateness_ms": 5_000}},
                          datetime.now(UTC))  # a windowed processor's job row
    tight = job.model_copy(update={"rebalance": job.rebalance.model_copy(update={"pause_budget_ms": 50.0})})
    snap = controller.collect(db_url, tight)
    decision = controller.evaluate(db_url, tight, snap)
    w = decision["target_workers"]
    assert decision["action"] == "scale_up" and w >= 2
    out = controller.plan_rebalance(db_url, tight, snap, decision)  # batched: one bin a step, off worker 0
    assert out is not None
    steps = [s.payload for s in store.plan_steps(db_url, out["plan_id"])]
    # no bin fits 50 ms by transfer; the first step grows W, which a handover cannot: pre-copy
    assert steps[0].get("precopy") is True and steps[0]["workers"] == w and len(steps) > 1
    assert all(s.get("handover") is True and s["workers"] == w for s in steps[1:])
    rec = store.get_plan(db_url, out["plan_id"])
    assert rec is not None and rec.params["move_mode"] == "auto"
    [first] = [r for r in rec.params["move_modes"] if r["bin"] == steps[0]["moves"][0]["bin"]]
    assert first["mode"] == "precopy" and f"grows the worker count 1 -> {w}" in first["reason"]
