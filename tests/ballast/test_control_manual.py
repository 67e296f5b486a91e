"""ballast.control.manual: a person's request (a worker count, explicit moves or a split) is checked
against the live map and the job's bounds before anything is planned, and refused with what is
wrong; a dry run stores nothing and lists each bin's move mode and why; `move_mode` forces one (a
forced handover without declared windows is refused); a takeover names only a plan of this job. On
a real migrated SQLite metrics DB."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from ballast import store
from ballast.control import collect, manual
from ballast.control.handoffs import Snapshot
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane


def test_manual_target_validates_moves(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    new, workers = manual.manual_target(snap.map, snap.bins, None, [{"bin": 3, "to": 2}])
    assert new[3] == 2 and workers == 3 and sum(a != b for a, b in zip(new, snap.map.assignment)) == 1
    for moves, why in (([{"bin": 16, "to": 1}], "outside 0..15"), ([{"bin": 3, "to": 0}], "already on worker 0"),
                       ([{"bin": 1, "to": 1}, {"bin": 1, "to": 1}], "named twice")):
        with pytest.raises(manual.InvalidRequest, match=why):
            manual.manual_target(snap.map, snap.bins, None, moves)
    with pytest.raises(manual.InvalidRequest, match="either target_workers or"):
        manual.manual_target(snap.map, snap.bins, 2, [{"bin": 1, "to": 1}])


def test_manual_split_is_one_step_that_moves_nothing_and_bad_counts_are_refused(db_url, job):
    with pytest.raises(manual.InvalidRequest, match="power of two above the job's 16 bins"):
        manual.plan_manual(db_url, job, {"split_to": 24, "dry_run": True})
    with pytest.raises(manual.InvalidRequest, match="power of two above"):
        manual.plan_manual(db_url, job, {"split_to": 16, "dry_run": True})
    with pytest.raises(manual.InvalidRequest, match="alone"):
        manual.plan_manual(db_url, job, {"split_to": 64, "target_workers": 2, "dry_run": True})
    dry = manual.plan_manual(db_url, job, {"split_to": 64, "dry_run": True})
    assert dry["plan_id"] is None and "16 -> 64 bins" in dry["rendered"]
    out = manual.plan_manual(db_url, job, {"split_to": 64, "dry_run": False})
    [step] = store.plan_steps(db_url, out["plan_id"])
    assert step.payload["kind"] == "split" and step.payload["bins"] == 64 and step.payload["map_version"] == 0
    assert list(store.get_plan(db_url, out["plan_id"]).target_assignment) == [0] * 64


def test_manual_merge_brings_the_parts_together_then_merges_and_bad_counts_are_refused(db_url, jobs_file,
                                                                                       unique_name):
    from ballast.config import get_job

    jobs_file(bins=8)
    seed_job(db_url, unique_name, bins=8, workers=2, assignment=[0, 1, 0, 0, 1, 1, 1, 0])
    job = get_job(unique_name)
    for params, why in (({"merge_to": 8}, "power of two below the job's 8 bins"), ({"merge_to": 3}, "power of two"),
                        ({"merge_to": 1}, "fewer bins than the job's 2 workers"),
                        ({"merge_to": 4, "target_workers": 2}, "alone"), ({"merge_to": 4, "split_to": 16}, "alone")):
        with pytest.raises(manual.InvalidRequest, match=why):
            manual.plan_manual(db_url, job, {**params, "dry_run": True})
    dry = manual.plan_manual(db_url, job, {"merge_to": 4, "dry_run": True})
    assert dry["plan_id"] is None and dry["steps"] == 2 and "8 -> 4 bins" in dry["rendered"], dry
    out = manual.plan_manual(db_url, job, {"merge_to": 2, "dry_run": False})
    moves, merge = store.plan_steps(db_url, out["plan_id"])
    assert moves.payload["kind"] == "moves" and merge.payload["kind"] == "merge"
    assert (merge.payload["bins"], merge.payload["map_version"]) == (2, 1)
    target = list(store.get_plan(db_url, out["plan_id"]).target_assignment)
    assert len(target) == 2 and set(target) <= {0, 1}


def test_manual_settings_are_one_step_that_keeps_the_map_and_bad_values_are_refused(db_url, job):
    from ballast.protocol import Settings, parse_control

    for params, why in (({"trigger_ms": 500, "target_workers": 2}, "alone"),
                        ({"max_records_per_epoch": 10, "split_to": 64}, "alone"),
                        ({"trigger_ms": -5}, r"trigger_ms must be an integer in 0..3600000"),
                        ({"trigger_ms": 3_600_001}, r"in 0..3600000"),
                        ({"max_records_per_epoch": True}, "must be an integer"),
                        ({"max_records_per_epoch": "10"}, "must be an integer")):
        with pytest.raises(manual.InvalidRequest, match=why):
            manual.plan_manual(db_url, job, {**params, "dry_run": True})
    assert not store.open_plans(db_url, job.job, job.operator), "a refused request stores nothing"
    dry = manual.plan_manual(db_url, job, {"max_records_per_epoch": 0, "dry_run": True})
    assert dry["plan_id"] is None and "max_records_per_epoch -> no cap" in dry["rendered"]
    out = manual.plan_manual(db_url, job, {"trigger_ms": 250, "max_records_per_epoch": 5000, "dry_run": False})
    [step] = store.plan_steps(db_url, out["plan_id"])
    sent = parse_control(json.dumps(step.payload))  # what the emitter sends, as the job parses it
    assert sent.kind == "settings" and sent.moves == () and sent.map_version == 0 and sent.workers == 1
    assert sent.settings == Settings(trigger_ms=250, max_records_per_epoch=5000)
    plan = store.get_plan(db_url, out["plan_id"])
    assert plan.target_workers == plan.source_workers and list(plan.target_assignment) == [0] * 16



@pytest.mark.parametrize("moves, why", [
    ([{"bin": "3", "to": 1}], r"moves\[0\] must be \{'bin': int, 'to': int\}"),
    ([{"bin": 3}], r"moves\[0\] must be"),
    ([{"bin": 3, "to": -1}], r"moves\[0\]: worker -1 is negative"),
    ([{"bin": 2, "to": 1}, {"bin": -1, "to": 1}], r"moves\[1\]: bin -1 is outside 0..15"),
])
def test_a_malformed_move_is_refused_naming_it(db_url, job, moves, why):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    with pytest.raises(manual.InvalidRequest, match=why):
        manual.manual_target(snap.map, snap.bins, None, moves)
    with pytest.raises(manual.InvalidRequest, match="either target_workers or"):
        manual.manual_target(snap.map, snap.bins, None, [])


def test_a_worker_count_is_placed_and_explicit_moves_keep_every_other_bin(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    placed, w = manual.manual_target(snap.map, snap.bins, 2, None)
    assert w == 2 and set(placed) == {0, 1}
    moved, w2 = manual.manual_target(snap.map, snap.bins, None, [{"bin": 0, "to": 1}, {"bin": 15, "to": 1}])
    assert w2 == 2 and moved == [1] + [0] * 14 + [1]


@pytest.mark.parametrize("params, why", [
    ({"target_workers": 5}, r"5 workers is outside this job's bounds \[1, 4\]"),
    ({"moves": [{"bin": 1, "to": 7}]}, r"8 workers is outside this job's bounds \[1, 4\]"),
    ({"target_workers": 1}, "the request changes nothing"),
    ({"target_workers": 2, "moves": [{"bin": 1, "to": 1}]}, "either target_workers or"),
])
def test_a_request_outside_the_bounds_or_changing_nothing_is_refused_and_stores_nothing(db_url, job, params, why):
    with pytest.raises(manual.InvalidRequest, match=why):
        manual.plan_manual(db_url, job, {**params, "dry_run": False})
    assert store.latest_plan(db_url, job.job, job.operator) is None


def test_a_dry_run_shows_the_plan_and_stores_nothing(db_url, job):
    out = manual.plan_manual(db_url, job, {"target_workers": 2, "strategy": "batched", "dry_run": True})
    assert out["dry_run"] and out["plan_id"] is None and out["steps"] >= 1 and out["bins"] >= 1
    assert out["predicted_ms"] > 0 and out["rendered"]
    assert store.latest_plan(db_url, job.job, job.operator) is None


def test_a_request_while_a_plan_is_open_or_before_the_job_ran_is_refused(db_url, job):
    with pytest.raises(manual.InvalidRequest, match="has no routing map"):
        manual.plan_manual(db_url, job.model_copy(update={"job": "never-ran"}), {"target_workers": 2})
    first = manual.plan_manual(db_url, job, {"target_workers": 2, "strategy": "fluid", "dry_run": False})
    rec = store.get_plan(db_url, first["plan_id"])
    assert rec is not None and rec.params["source"] == "manual" and first["rendered"]
    with pytest.raises(manual.InvalidRequest, match=f"open plan {first['plan_id']}") as exc:
        manual.plan_manual(db_url, job, {"target_workers": 3, "dry_run": False})
    assert "this manual migration cannot start" in str(exc.value)


def test_a_takeover_names_only_an_open_plan_of_this_job(db_url, job):
    with pytest.raises(manual.InvalidRequest, match=f"plan nope is not a plan of {job.job}/keycount"):
        manual.plan_manual(db_url, job, {"take_over": "nope"})
    other = job.model_copy(update={"job": job.job + "-other"})
    seed_job(db_url, other.job, bins=16)
    theirs = manual.plan_manual(db_url, other, {"target_workers": 2, "dry_run": False})["plan_id"]
    with pytest.raises(manual.InvalidRequest, match="is not a plan of"):
        manual.take_over_manual(db_url, job, theirs, force=True)
    assert store.get_plan(db_url, theirs).owner == store.current_owner()  # type: ignore[union-attr]
    store.set_plan_status(db_url, theirs, "completed", finished=True)
    with pytest.raises(manual.InvalidRequest, match="already completed"):
        manual.take_over_manual(db_url, other, theirs, force=True)


def test_a_manual_run_forces_a_move_mode_and_a_forced_handover_without_windows_is_refused(db_url, job):
    for params, why in (({"target_workers": 2, "move_mode": "handover"},
                         r"move_mode handover: bin \d+: a handover needs the operator's windows .* declares none"),
                        ({"target_workers": 2, "move_mode": "teleport"}, "move_mode must be one of auto, transfer"),
                        ({"split_to": 64, "move_mode": "precopy"}, "split_to moves none by choice"),
                        ({"trigger_ms": 500, "move_mode": "transfer"}, "leave move_mode at auto")):
        with pytest.raises(manual.InvalidRequest, match=why):
            manual.plan_manual(db_url, job, {**params, "dry_run": False})
    assert store.latest_plan(db_url, job.job, job.operator) is None, "a refused request stores nothing"
    dry = manual.plan_manual(db_url, job, {"target_workers": 2, "move_mode": "precopy", "dry_run": True})
    assert dry["modes"] and all(r["mode"] == "precopy" and r["reason"] == "precopy: forced by the run"
                                for r in dry["modes"])
    assert "move modes: " in dry["rendered"] and "precopy: forced by the run" in dry["rendered"]
    out = manual.plan_manual(db_url, job, {"target_workers": 2, "move_mode": "precopy", "dry_run": False})
    assert all(s.payload.get("precopy") is True for s in store.plan_steps(db_url, out["plan_id"]))
    assert store.get_plan(db_url, out["plan_id"]).params["move_mode"] == "precopy"  # type: ignore[union-attr]


def test_a_dry_run_lists_each_bins_mode_and_why_and_a_handover_keeps_the_worker_count(db_url, jobs_file,
                                                                                     unique_name):
    from ballast.config import get_job
    from ballast.store import writer

    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2)  # bins 0-7 on worker 0, 8-15 on worker 1
    writer.ensure_job_row(db_url, unique_name, "keycount", 16,  # a windowed processor's job row
                          {"window": {"length_ms": 10_000, "lateness_ms": 20_000}}, datetime.now(UTC))
    cfg = get_job(unique_name)
    tight = cfg.model_copy(update={"rebalance": cfg.rebalance.model_copy(update={"pause_budget_ms": 50.0})})
    swap = {"moves": [{"bin": 0, "to": 1}, {"bin": 15, "to": 0}], "strategy": "all-at-once", "dry_run": True}
    dry = manual.plan_manual(db_url, tight, swap)  # ~50.1 ms a bin by transfer: over the budget
    assert dry["steps"] == 1 and [r["mode"] for r in dry["modes"]] == ["handover", "handover"]
    assert "estimated" in dry["modes"][0]["reason"] and "tumbling 10000 ms, lateness 20000 ms" in dry["rendered"]
    assert "bin 0 0->1: handover: a transfer would pause ~50 ms (budget 50)" in dry["rendered"]
    assert [r["mode"] for r in manual.plan_manual(db_url, cfg, swap)["modes"]] == ["transfer", "transfer"]
    slow = tight.model_copy(update={"rebalance": tight.rebalance.model_copy(update={"step_budget_s": 10.0})})
    assert all("past the 10 s step budget" in r["reason"] for r in manual.plan_manual(db_url, slow, swap)["modes"])
    grow = manual.plan_manual(db_url, tight, {"target_workers": 3, "strategy": "all-at-once", "move_mode": "handover",
                                              "dry_run": False})  # into the new worker: that step grows W
    steps = [s.payload for s in store.plan_steps(db_url, grow["plan_id"])]
    assert steps[0].get("precopy") is True and steps[0]["workers"] == 3
    assert all(m["to"] == 2 for m in steps[0]["moves"]) and all(s.get("handover") for s in steps[1:])
    modes = store.get_plan(db_url, grow["plan_id"]).params["move_modes"]  # type: ignore[union-attr]
    assert {r["mode"] for r in modes if "grows the worker count 2 -> 3" in r["reason"]} == {"precopy"}


def test_a_session_window_job_is_handed_over_only_when_a_run_forces_it(db_url, jobs_file, unique_name):
    """Session windows: the planner never chooses a handover on its own (a busy key holds it open with
    no bound); move_mode=handover forces it, and the dry run says the wait is unbounded."""
    from ballast.config import get_job
    from ballast.store import writer

    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, workers=2)
    writer.ensure_job_row(db_url, unique_name, "keycount", 16,  # a session-window processor's job row
                          {"window": {"length_ms": 0, "gap_ms": 2_000, "lateness_ms": 5_000}}, datetime.now(UTC))
    cfg = get_job(unique_name)
    tight = cfg.model_copy(update={"rebalance": cfg.rebalance.model_copy(update={"pause_budget_ms": 50.0})})
    swap = {"moves": [{"bin": 0, "to": 1}, {"bin": 15, "to": 0}], "strategy": "all-at-once", "dry_run": True}
    auto = manual.plan_manual(db_url, tight, swap)
    assert [r["mode"] for r in auto["modes"]] == ["precopy", "precopy"]
    assert all("no bound on the wait" in r["reason"] for r in auto["modes"])
    forced = manual.plan_manual(db_url, tight, {**swap, "move_mode": "handover"})
    assert [r["mode"] for r in forced["modes"]] == ["handover", "handover"]
    assert "the wait is unbounded" in forced["rendered"] and "stays busy" in forced["modes"][0]["reason"]
    out = manual.plan_manual(db_url, tight, {**swap, "move_mode": "handover", "dry_run": False})
    assert all(s.payload.get("handover") is True for s in store.plan_steps(db_url, out["plan_id"]))
