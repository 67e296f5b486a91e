"""ballast.control.evaluate: DS2 and the guards decide on a snapshot (`assess`, pure: nothing is
stored), capped by the cluster's capacity; `evaluate` stores every decision with the guards' state,
so activation, warm-up, the scale-down delay and an ineffective scale-up carry over between runs.
At equal W, skewed workers get a rebalance. On a real migrated SQLite metrics DB."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from ballast import controller, policy, store
from ballast.config import JobConfig, get_job
from ballast.control import collect, evaluate, verify
from ballast.control.handoffs import Snapshot
from ballast.protocol import step_from_document
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.jobs import write_jobs_file
from tests.helpers.stepapplier import apply_step, seed_job

pytestmark = pytest.mark.controlplane


def _decisions(url: str) -> int:
    with session_scope(url) as s:
        return int(s.scalar(select(func.count()).select_from(m.Decision)) or 0)


def test_assess_is_pure_and_evaluate_stores_its_decision(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    a = evaluate.assess(job, snap, policy.GuardState(), datetime.now(UTC))
    assert (a.action, a.current_workers) == ("scale_up", 1) and a.target_workers == a.proposed_workers >= 2
    assert a.true_rate and a.inputs["map_version"] == 0 and _decisions(db_url) == 0  # nothing stored
    capped = evaluate.assess(job, snap, policy.GuardState(), datetime.now(UTC), capacity=2)
    assert capped.target_workers == 2  # the cluster's capacity bounds the target
    d = evaluate.evaluate(db_url, job, snap)
    assert d.action == "scale_up" and d.decision_id is not None and _decisions(db_url) == 1
    stored = store.latest_decision(db_url, job.job, job.operator)
    assert stored is not None and evaluate.GUARD_STATE_KEY in stored.inputs


def _job_with(tmp_path, monkeypatch, name: str, **rebalance) -> JobConfig:  # type: ignore[no-untyped-def]
    """The test's job in a jobs file of its own, with these rebalance knobs."""
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(write_jobs_file(tmp_path / "jobs.yaml", name, 16, max_workers=4,
                                                                rebalance=rebalance)))
    return get_job(name)


def _snapshot(url: str, cfg: JobConfig) -> Snapshot:
    snap = collect.collect(url, cfg)
    assert isinstance(snap, Snapshot)
    return snap


def test_guard_state_carries_over_between_runs_and_warm_up_counts_from_the_plans_end(
        db_url, tmp_path, monkeypatch, unique_name):
    """Each rebalance run is a fresh process: activation history and the ineffective-scale-up
    block reach the next run only through the stored decision, and warm-up starts when the
    plan's last step was verified, not when it was decided."""
    cfg = _job_with(tmp_path, monkeypatch, unique_name, activation=2, warmup_s=60, warmup_epochs=0)
    seed_job(db_url, unique_name, bins=16)  # W = 1 fed 15k rows/s, 10k per worker: DS2 asks for 2
    snap = _snapshot(db_url, cfg)
    t0 = datetime.now(UTC) - timedelta(seconds=600)
    first = evaluate.evaluate(db_url, cfg, snap, now=t0)
    assert (first.action, first.target_workers) == ("no_change", 1) and "activation 1/2" in first.reason
    assert evaluate.assess(cfg, snap, policy.GuardState(), t0).action == "no_change"  # alone, a run never acts
    second = evaluate.evaluate(db_url, cfg, snap, now=t0 + timedelta(seconds=1))
    assert second.action == "scale_up" and second.target_workers >= 2, second.reason
    w = second.target_workers

    # the plan carried out as the data plane records it, then verified: the plan ends now
    out = controller.plan_rebalance(db_url, cfg, snap.to_dict(), second.to_dict())
    assert out is not None
    for rec in store.plan_steps(db_url, out["plan_id"]):
        assert apply_step(db_url, unique_name, "keycount", step_from_document(rec.payload)) is not None
    done = verify.verify(db_url, out["plan_id"])
    finished = store.get_plan(db_url, out["plan_id"]).finished_at  # type: ignore[union-attr]
    assert finished is not None and finished - (t0 + timedelta(seconds=1)) > timedelta(seconds=cfg.rebalance.warmup_s)
    # at W workers the job is overloaded again, and the added workers added nothing (10k rows/s in
    # all): DS2 asks for more, but the last scale-up was ineffective
    final = store.map_at(db_url, unique_name, "keycount", done.map_version)
    assert final is not None and final.workers == w
    seed_job(db_url, unique_name, bins=16, workers=w, per_worker_rate=10000.0 / w, first_epoch=final.epoch + 1,
             map_version=done.map_version, assignment=list(final.assignment))
    snap2 = _snapshot(db_url, cfg)
    assert snap2.map.workers == w

    warm = evaluate.evaluate(db_url, cfg, snap2, now=finished + timedelta(seconds=30))
    assert (warm.action, warm.target_workers) == ("no_change", w) and "warm-up" in warm.reason, warm.reason
    judged = evaluate.evaluate(db_url, cfg, snap2, now=finished + timedelta(seconds=61))
    assert judged.action == "no_change" and "warm-up" not in judged.reason, judged.reason
    stored = store.latest_decision(db_url, unique_name, "keycount")
    assert stored is not None and stored.inputs["scale_up_gain_per_added_instance"] < 0.1
    assert stored.inputs[evaluate.GUARD_STATE_KEY]["scale_up_blocked"]
    blocked = evaluate.evaluate(db_url, cfg, snap2, now=finished + timedelta(seconds=62))
    assert (blocked.action, blocked.target_workers) == ("no_change", w), blocked.reason
    assert blocked.reason.startswith("scale-up to") and f"blocked: the scale-up 1->{w}" in blocked.reason
    assert blocked.proposed_workers > w  # DS2 still asks for more; the carried-over block says no


def test_a_delayed_scale_down_counts_its_wait_across_runs(db_url, tmp_path, monkeypatch, unique_name):
    """The lower target's start is remembered between runs: the run a delay later scales down."""
    cfg = _job_with(tmp_path, monkeypatch, unique_name, scale_down_delay_s=300)
    seed_job(db_url, unique_name, bins=16, workers=2, input_rate=2000.0)  # 10 % busy: DS2 asks for 1
    snap = _snapshot(db_url, cfg)
    t0 = datetime.now(UTC)
    pending = evaluate.evaluate(db_url, cfg, snap, now=t0)
    assert (pending.action, pending.target_workers) == ("no_change", 2) and "pending" in pending.reason
    assert evaluate.evaluate(db_url, cfg, snap, now=t0 + timedelta(seconds=200)).action == "no_change"
    down = evaluate.evaluate(db_url, cfg, snap, now=t0 + timedelta(seconds=301))
    assert (down.action, down.target_workers) == ("scale_down", 1) and "held 301s" in down.reason, down.reason



def test_guard_bounds_are_the_jobs_capped_by_the_clusters_capacity_never_below_the_minimum() -> None:
    cfg = JobConfig(job="j", operator="keycount", input_topic="t", min_workers=2, initial_workers=2, max_workers=6,
                    rebalance={"warmup_s": 5, "activation": 3, "scale_down_delay_s": 9})  # type: ignore[arg-type]
    g = evaluate.guard_config(cfg)
    assert (g.min_workers, g.max_workers, g.warmup_s, g.activation, g.scale_down_delay_s) == (2, 6, 5, 3, 9)
    assert evaluate.guard_config(cfg, capacity=4).max_workers == 4
    assert evaluate.guard_config(cfg, capacity=10).max_workers == 6  # the jobs file's bound still holds
    assert evaluate.guard_config(cfg, capacity=1).max_workers == 2  # never below min_workers
    assert evaluate.guard_config(cfg, capacity=0).max_workers == 6  # 0: capacity not reported


def test_skewed_workers_at_equal_w_get_a_rebalance(db_url, jobs_file, unique_name):
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2, input_rate=10000.0, per_worker_rate=10000.0)
    cfg = get_job(unique_name)
    snap = _snapshot(db_url, cfg)
    now = datetime.now(UTC)
    even = evaluate.assess(cfg, snap, policy.GuardState(), now)
    assert (even.action, even.target_workers) == ("no_change", 2) and even.inputs["skew_before"] < 1.5, even.reason
    # worker 0's eight bins carry ten times worker 1's: max/mean 1.8 > 1 + skew_threshold (0.5)
    load = tuple(100.0 if w == 0 else 10.0 for w in snap.map.assignment)
    skewed = dataclasses.replace(snap, bins=dataclasses.replace(snap.bins, load=load))
    a = evaluate.assess(cfg, skewed, policy.GuardState(), now)
    assert (a.action, a.current_workers, a.target_workers) == ("rebalance", 2, 2), a.reason
    assert "worker loads are skewed (max/mean 1.82" in a.reason and a.target_bins is None
    assert a.inputs["skew_before"] > 1.5 > a.inputs["skew_after"]


def test_the_critical_path_holds_a_scale_up_that_would_barely_shorten_the_epochs(db_url, job):
    """The decision that changes because of the trace: DS2 proposes more workers; the stored traces
    say the epochs wait on Spark's source stage, not on the workers: W stays, and the reason says why."""
    from ballast.store import traces, writer
    from ballast.tracing import Activity, Message, Trace

    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot) and snap.critical == ()  # no trace stored: DS2 alone
    before = evaluate.assess(job, snap, policy.GuardState(), datetime.now(UTC))
    assert before.action == "scale_up"
    fold_us = int(snap.workers[0].useful_ms * 1000)  # the trace's fold is what the counter measured
    for e in snap.epochs:  # each epoch: a short plan, a long source stage, a short fold, the commit
        t0 = e.epoch * 100_000_000
        with writer.epoch_transaction(db_url) as s:
            traces.replace_trace(s, traces.trace_row(job.job, job.operator, e.epoch, Trace(
                (Activity("driver", "plan", t0, t0 + fold_us // 2),
                 Activity("worker 0", "fold", t0 + 17 * fold_us // 2, t0 + 19 * fold_us // 2),
                 Activity("driver", "db", t0 + 19 * fold_us // 2, t0 + 10 * fold_us)),
                (Message(0, 1, "source stage"), Message(1, 2, "task end")))))
    traced = collect.collect(db_url, job)
    assert isinstance(traced, Snapshot)
    assert dict(traced.critical) == pytest.approx({"source stage": 0.8, "fold on worker 0": 0.1,
                                                   "plan on driver": 0.05, "db on driver": 0.05})
    assert Snapshot.from_dict(traced.to_dict()) == traced  # the hand-off survives XCom
    assert evaluate.assess(job, traced, policy.GuardState(), datetime.now(UTC)).action == "scale_up", "off by default"
    on = job.model_copy(update={"rebalance": job.rebalance.model_copy(update={"critical_min_gain": 0.1})})
    after = evaluate.assess(on, traced, policy.GuardState(), datetime.now(UTC))
    assert after.action == "no_change" and after.target_workers == before.target_workers
    assert "the workers hold only 10% of the critical path (source stage 80%" in after.reason
    assert after.inputs["critical.workers_share"] == pytest.approx(0.1)


def test_useful_time_from_the_trace_keeps_w_that_a_migrations_loads_would_raise(db_url, jobs_file, unique_name):
    """DS2's decision that changes because of the trace (docs/policy.md, "Useful time from the
    trace"): two workers keep up with the load (no change), but the window's first epoch is the
    cut-over of the migration that made them two, and each worker spent 3 s loading its moved bins
    before folding. The counters count that as useful, so the workers look 45 % slower and DS2 asks
    for more; the stored traces put it in `prepare`, apart from the fold, and W stays."""
    from sqlalchemy import update

    from ballast.store import traces, writer
    from ballast.tracing import Activity, Message, Trace

    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2, input_rate=15000.0, per_worker_rate=10000.0)
    cfg = get_job(unique_name)
    now = datetime.now(UTC)
    steady = _snapshot(db_url, cfg)
    assert evaluate.assess(cfg, steady, policy.GuardState(), now).action == "no_change"
    first, load_ms = steady.epochs[0].epoch, 3000.0
    wm, em = m.WorkerMetrics, m.EpochMetrics
    with session_scope(db_url) as s:  # what the data plane records for the cut-over epoch
        s.execute(update(wm).where(wm.job == unique_name, wm.epoch == first).values(
            useful_ms=wm.useful_ms + load_ms, wall_ms=wm.wall_ms + load_ms))
        s.execute(update(em).where(em.job == unique_name, em.epoch == first).values(batch_ms=em.batch_ms + load_ms))
    counted = _snapshot(db_url, cfg)
    assert counted.useful_basis == "counters" and "no stored traces" in counted.useful_reason
    before = evaluate.assess(cfg, counted, policy.GuardState(), now)
    assert before.action == "scale_up" and before.target_workers > 2, before.reason
    for e in steady.epochs:  # each epoch: plan; per worker the load (cut-over only), then the fold; commit
        t0, prep = e.epoch * 100_000_000, int(load_ms * 1000) if e.epoch == first else 0
        fold = int(steady.workers[0].useful_ms * 1000)
        acts = [Activity("driver", "plan", t0, t0 + 50_000)]
        for w in (0, 1):
            if prep:
                acts.append(Activity(f"worker {w}", "prepare", t0 + 60_000, t0 + 60_000 + prep))
            acts.append(Activity(f"worker {w}", "fold", t0 + 60_000 + prep, t0 + 60_000 + prep + fold))
        acts.append(Activity("driver", "db", t0 + 100_000 + prep + fold, t0 + 150_000 + prep + fold))
        starts = [i for i, a in enumerate(acts) if a.timeline != "driver" and (a.kind == "prepare" or not prep)]
        msgs = tuple(Message(0, i, "source stage") for i in starts) + (Message(len(acts) - 2, len(acts) - 1,
                                                                                 "task end"),)
        with writer.epoch_transaction(db_url) as s:
            traces.replace_trace(s, traces.trace_row(unique_name, cfg.operator, e.epoch, Trace(tuple(acts), msgs)))
    traced = _snapshot(db_url, cfg)
    assert traced.useful_basis == "trace", traced.useful_reason
    assert "6.0 s of the counters' 13.5 s (44%) was bins brought up to date" in traced.useful_reason
    assert {w.useful_ms for w in traced.workers} == {steady.workers[0].useful_ms}
    assert Snapshot.from_dict(traced.to_dict()) == traced  # the hand-off survives XCom
    after = evaluate.assess(cfg, traced, policy.GuardState(), now)
    assert after.action == "no_change" and after.target_workers == 2, after.reason
    assert after.inputs["useful.basis"] == "trace"
    off = cfg.model_copy(update={"rebalance": cfg.rebalance.model_copy(update={"useful_from_trace": False})})
    untraced = _snapshot(db_url, off)
    assert untraced.useful_basis == "counters" and "is off" in untraced.useful_reason
    assert evaluate.assess(off, untraced, policy.GuardState(), now).action == "scale_up"


def test_a_bin_hot_on_the_critical_path_gets_a_rebalance_that_its_records_would_not(db_url, jobs_file, unique_name):
    """The planner's decision that changes because of the trace (docs/policy.md, "Hot bins on the
    critical path"): the bins carry equal records, but one bin's folds take thirty times as long
    (a key whose records cost more). By records the workers are even: no change. With stored traces
    whose critical path is the folds, the bins are weighed by fold time: worker 0 is overloaded and
    the hot bin gets a placement of its own."""
    from sqlalchemy import update

    from ballast.store import traces, writer
    from ballast.tracing import Activity, Message, Trace

    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2, input_rate=10000.0, per_worker_rate=10000.0)
    cfg = get_job(unique_name)
    snap = _snapshot(db_url, cfg)
    hot = snap.map.assignment.index(0)  # a bin of worker 0
    bm = m.BinMetrics
    with session_scope(db_url) as s:  # what the workers measured: 1 µs per record, the hot bin 30 µs
        s.execute(update(bm).where(bm.job == unique_name).values(fold_us=bm.records))
        s.execute(update(bm).where(bm.job == unique_name, bm.bin == hot).values(fold_us=bm.records * 30))
    now = datetime.now(UTC)
    untraced = _snapshot(db_url, cfg)
    assert untraced.bins.basis == "records" and "no stored traces" in untraced.bins.basis_reason
    even = evaluate.assess(cfg, untraced, policy.GuardState(), now)
    assert even.action == "no_change" and even.inputs["placement.basis"] == "records", even.reason
    for e in snap.epochs:  # each epoch: a short plan, worker 0's long fold, worker 1's short one, the commit
        t0 = e.epoch * 10_000_000
        with writer.epoch_transaction(db_url) as s:
            traces.replace_trace(s, traces.trace_row(unique_name, cfg.operator, e.epoch, Trace(
                (Activity("driver", "plan", t0, t0 + 50_000), Activity("worker 0", "fold", t0 + 60_000, t0 + 900_000),
                 Activity("worker 1", "fold", t0 + 60_000, t0 + 300_000),
                 Activity("driver", "db", t0 + 900_000, t0 + 950_000)),
                (Message(0, 1, "source stage"), Message(0, 2, "source stage"), Message(1, 3, "task end")))))
    traced = _snapshot(db_url, cfg)
    assert traced.bins.basis == "fold time" and f"hottest: bin {hot}" in traced.bins.basis_reason
    assert Snapshot.from_dict(traced.to_dict()) == traced  # the hand-off survives XCom
    after = evaluate.assess(cfg, traced, policy.GuardState(), now)
    assert after.action == "rebalance" and after.target_workers == 2, after.reason
    assert after.inputs["placement.basis"] == "fold time" and after.inputs["skew_before"] > 1.5
    new = policy.place(list(traced.map.assignment), 2, list(traced.bins.load), list(traced.bins.bytes))
    assert [b for b, w in enumerate(new) if w == new[hot]] == [hot], "the hot bin gets a worker to itself"


def test_with_a_latency_goal_a_run_that_keeps_w_tunes_the_settings_by_a_settings_step(
        db_url, tmp_path, monkeypatch, unique_name):
    """W = 2 keeps up (10k rows/s, 10k per worker): DS2 keeps W, and with a 8 s p99 goal the
    autotuner lengthens the 1 s trigger (cheaper per event, within the goal) by one bounded step;
    the plan is one settings step; once the job applied it, the next snapshot reads the new
    settings. Without a goal, or within the hold after a change, nothing is tuned."""
    from ballast.protocol import Settings, parse_control
    from ballast.store import writer

    cfg = _job_with(tmp_path, monkeypatch, unique_name, latency_goal_ms=8000, autotune_hold_s=120)
    seed_job(db_url, unique_name, bins=16, workers=2, input_rate=10000.0, per_worker_rate=10000.0)
    writer.ensure_job_row(db_url, unique_name, "keycount", 16, {"trigger_ms": 1000, "max_offsets_per_trigger": None},
                          datetime.now(UTC))  # what the job's start records: its command line
    snap = _snapshot(db_url, cfg)
    assert (snap.trigger_ms, snap.max_records_per_epoch) == (1000, None)
    now = datetime.now(UTC)
    a = evaluate.assess(cfg, snap, policy.GuardState(), now)
    assert a.action == "tune" and a.target_workers == 2 and a.settings is not None, a.reason
    assert a.settings["trigger_ms"] == 4000, "at most x4 in one decision"
    assert a.inputs["tune.predicted_p99_ms"] < 8000 * 0.8 and "predicts p99" in a.reason
    assert a.inputs["tune.slow_epoch_factor"] >= 1.0  # the window's slowest epoch over its median, in the decision
    untuned = _job_with(tmp_path, monkeypatch, unique_name)
    assert evaluate.assess(untuned, snap, policy.GuardState(), now).action == "no_change", "no goal: no tuning"
    held = policy.GuardState(last_change_at=now.timestamp() - 30)
    assert evaluate.assess(cfg, snap, held, now).action == "no_change"

    d = evaluate.evaluate(db_url, cfg, snap, now=now)
    out = controller.plan_rebalance(db_url, cfg, snap.to_dict(), d.to_dict())
    assert out is not None
    [rec] = store.plan_steps(db_url, out["plan_id"])
    step = parse_control(json.dumps(rec.payload))
    assert step.kind == "settings" and step.settings == Settings(**d.settings)  # type: ignore[arg-type]
    assert apply_step(db_url, unique_name, "keycount", step) is not None
    assert store.job_settings(db_url, unique_name, "keycount") == (4000, step.settings.max_records_per_epoch)
    # the same name deployed again on a new checkpoint (its old row deleted, as the binding check asks):
    # its journal holds none of the old deployment's settings, and neither does what the controller reads
    with session_scope(db_url) as s:
        s.delete(s.get(m.Job, (unique_name, "keycount")))
    writer.ensure_job_row(db_url, unique_name, "keycount", 16, {"trigger_ms": 700, "max_offsets_per_trigger": 900},
                          datetime.now(UTC) + timedelta(seconds=1))
    assert store.job_settings(db_url, unique_name, "keycount") == (700, 900)
