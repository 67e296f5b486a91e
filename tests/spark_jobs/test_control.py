"""spark_jobs.control: an epoch applies at most one valid step (one new map version each) and
rejects a step that cannot apply whole, with its reason; steps queue in order, duplicates change
nothing, a newer plan supersedes; splits and pre-copy; upgrades, and shadow upgrades tried over
several decisions before they cut over or are rejected; the typed steps round-trip through the
journal's JSON (lines written before the types: test_control_state.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from ballast.protocol import ControlStep, Move
from spark_jobs.control import ControlRecord, decide, has_due_step, tick_message
from spark_jobs.control_state import AppliedStep, EpochControl, QueuedStep, initial_state
from tests.helpers.control import control_step as _step

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


# ------------------------------------------------------------------ decisions ------------------


def _run(st, msgs, epoch=5, now=NOW):
    recs = [ControlRecord(f"0:{i}", m if isinstance(m, bytes) else m.to_json()) for i, m in enumerate(msgs)]
    return decide(st, recs, epoch=epoch, now=now, job="j", operator="keycount", max_future_s=3600)


def test_decide_applies_one_valid_step_and_bumps_the_map():
    st = initial_state(8, 2)
    d = _run(st, [_step(moves=((0, 0, 1), (7, 1, 0)))])
    assert d.applied and d.applied.map_version_after == 1
    assert d.state_after.assignment[0] == 1 and d.state_after.assignment[7] == 0
    assert st.assignment[0] == 0, "input state is not mutated"
    assert [(e.action, e.checkpoint) for e in d.entries] == [("apply", True)]


@pytest.mark.parametrize("msg, why", [
    (_step(moves=((9, 0, 1),)), "unknown bin"),
    (_step(version=3), "map version mismatch"),
    (_step(moves=((0, 1, 0),)), "wrong source worker"),
    (_step(moves=((0, 0, 2),)), "workers must be <"),
    (_step(workers=1), "would sit on worker"),
    (_step(eff=NOW + timedelta(days=2)), "in the future"),
])
def test_decide_rejects_whole_step_with_reason(msg, why):
    st = initial_state(8, 2)
    d = _run(st, [msg])
    assert d.applied is None
    assert d.state_after.assignment == st.assignment and d.state_after.map_version == 0
    [e] = d.entries
    assert e.action == "reject" and why in e.reason and e.checkpoint


def test_malformed_and_foreign_are_events_not_checkpoints():
    d = _run(initial_state(8, 2), [b"{oops", json.dumps({"schema": "nope"}).encode(), _step(job="other"),
                                   tick_message("j", "keycount", NOW)])
    assert [(e.action, e.event, e.checkpoint) for e in d.entries] == [("reject", True, False)] * 3
    assert "other/keycount" in d.entries[2].reason


def test_queue_order_duplicates_and_supersede():
    st = initial_state(8, 2)
    s1 = _step(plan="a", step=1, steps=3, moves=((0, 0, 1),), version=0)
    s2 = _step(plan="a", step=2, steps=3, moves=((1, 0, 1),), version=1)
    s3 = _step(plan="a", step=3, steps=3, moves=((2, 0, 1),), version=2, eff=NOW + timedelta(seconds=30))
    d = _run(st, [s2, s1, s3])  # out of order: step 2 waits for step 1; one step per epoch
    assert d.applied.step == 1
    assert {(e.plan_id, e.step, e.action) for e in d.entries} == {
        ("a", 1, "apply"), ("a", 2, "queue"), ("a", 3, "queue")}
    assert not has_due_step(initial_state(8, 2), NOW)
    assert has_due_step(d.state_after, NOW)
    d2 = _run(d.state_after, [s1], epoch=6)  # duplicate of a finished step: no checkpoint, ack re-echo
    assert d2.applied.step == 2
    dup = [e for e in d2.entries if e.action == "duplicate"]
    assert dup and dup[0].reecho and not dup[0].checkpoint
    d3 = _run(d2.state_after, [], epoch=7)
    assert d3.applied is None and len(d3.state_after.queue) == 1  # step 3 not yet due
    d4 = _run(d3.state_after, [_step(plan="b", moves=((3, 0, 1),), version=2)], epoch=8)
    acts = {(e.plan_id, e.step): e.action for e in d4.entries}
    assert acts == {("a", 3): "supersede", ("b", 1): "apply"}
    d5 = _run(d4.state_after, [s3], epoch=9)  # a late step of a superseded plan
    assert [e.action for e in d5.entries] == ["duplicate"]


def test_moveless_step_changes_workers_and_bumps_the_version():
    d = _run(initial_state(8, 2), [_step(moves=(), workers=3)])
    assert d.applied and d.state_after.workers == 3 and d.state_after.map_version == 1
    d2 = _run(d.state_after, [_step(plan="q", moves=(), workers=3, version=1)], epoch=6)
    assert d2.state_after.map_version == 2, "a pure noop is a version too"


def test_step_after_a_rejected_step_is_rejected():
    st = initial_state(8, 2)
    bad = _step(plan="a", step=1, steps=2, version=9)
    nxt = _step(plan="a", step=2, steps=2, version=0)
    d = _run(st, [bad, nxt])
    assert [(e.step, e.action) for e in d.entries] == [(1, "reject"), (2, "reject")]
    assert "was rejected" in d.entries[1].reason


# ------------------------------------------------------------------ split ------------------------
def _split(bins, version=0, workers=2, plan="s"):
    import dataclasses

    return dataclasses.replace(_step(plan=plan, moves=(), workers=workers, version=version), kind="split", bins=bins)


def test_split_raises_the_bin_count_and_keeps_every_key_on_its_worker():
    st = initial_state(8, 2)
    st.assignment = [0, 1, 0, 1, 1, 0, 0, 1]
    d = _run(st, [_split(32)])
    assert d.applied and d.applied.bins_before == 8 and d.applied.bins == 32 and d.applied.moves == ()
    after = d.state_after.assignment
    assert len(after) == 32 and d.state_after.map_version == 1 and d.state_after.workers == 2
    assert all(after[b] == st.assignment[b >> 2] for b in range(32))  # bin b's quarters stay on b's worker
    # the next step addresses the new bins: move one quarter of old bin 0 away, alone
    d2 = _run(d.state_after, [_step(plan="m", moves=((1, 0, 1),), version=1)], epoch=6)
    assert d2.applied and d2.state_after.assignment[:4] == [0, 1, 0, 0]
    assert d2.warm == {}




# ------------------------------------------------------------------ merge ------------------------
def _merge(bins, version=0, workers=2, plan="g"):
    import dataclasses

    return dataclasses.replace(_split(bins, version, workers, plan), kind="merge")


def test_merge_lowers_the_bin_count_where_the_parts_share_a_worker():
    st = initial_state(8, 2)
    st.assignment = [0, 0, 1, 1, 1, 1, 0, 0]
    d = _run(st, [_merge(2, plan="g1")])
    assert d.applied is None and "first: bin 0, parts on workers [0, 0, 1, 1]" in d.entries[0].reason
    d = _run(st, [_merge(4)])
    assert d.applied and d.applied.is_merge and not d.applied.is_split
    assert (d.applied.bins_before, d.applied.bins, d.applied.moves) == (8, 4, ())
    assert d.state_after.assignment == [0, 1, 1, 0] and d.state_after.map_version == 1
    # a split after it goes back to the first map's layout
    d2 = _run(d.state_after, [_split(8, version=1, plan="s2")], epoch=6)
    assert d2.applied and d2.state_after.assignment == st.assignment


@pytest.mark.parametrize("msg, why", [
    (_split(8), "must raise the bin count"),
    (_split(4), "must raise the bin count"),
    (_split(16, workers=3), "keeps the worker count"),
    (_split(16, version=2), "map version mismatch"),
    (_merge(8), "must lower the bin count"),
    (_merge(16), "must lower the bin count"),
    (_merge(4, workers=3), "keeps the worker count"),
    (_merge(1), "fewer bins than the 2 workers"),
    (_merge(4, version=2), "map version mismatch"),
])
def test_a_split_or_merge_is_rejected_whole_when_it_cannot_apply(msg, why):
    st = initial_state(8, 2)
    d = _run(st, [msg])
    assert d.applied is None and d.state_after.assignment == st.assignment
    [e] = d.entries
    assert e.action == "reject" and why in e.reason and e.checkpoint


# ------------------------------------------------------------------ pre-copy ---------------------
def test_precopy_step_warms_one_epoch_then_applies():
    import dataclasses

    st = initial_state(8, 2)
    step = dataclasses.replace(_step(moves=((0, 0, 1), (5, 1, 0))), precopy=True)
    d = _run(st, [step], epoch=5)
    assert d.applied is None and d.warm == {"0": [5], "1": [0]}
    assert [e.action for e in d.entries] == ["queue"] and "pre-copy" in d.entries[0].reason
    assert has_due_step(d.state_after, NOW)  # the runner ticks for it
    d2 = _run(d.state_after, [], epoch=6)
    assert d2.applied and d2.applied.moves == (Move(0, 0, 1), Move(5, 1, 0)) and d2.warm == {}
    # a replay of the warm epoch decides the same (the decision is logged; this is the pure part)
    assert _run(st, [step], epoch=5).to_dict()["warm"] == d.to_dict()["warm"]


# ------------------------------------------------------------------ typed hand-offs ----------------
def _typed_step(step: int, steps: int, moves: tuple[Move, ...], version: int, *, later: float = 0.0,
          precopy: bool = False) -> ControlStep:
    return ControlStep("j", "op", "p1", step, steps, "moves", moves, 2, version, NOW,
                       NOW + timedelta(seconds=later), precopy=precopy)


def _rec(s: ControlStep, off: int) -> ControlRecord:
    return ControlRecord(f"0:{off}", s.to_json())


def test_decide_hands_typed_steps_to_the_runner_and_the_journal_round_trips_them():
    st = initial_state(8, 2)
    now_step = _typed_step(1, 2, (Move(0, 0, 1),), 0)
    later = _typed_step(2, 2, (Move(5, 1, 0),), 1, later=60.0, precopy=True)
    d = decide(st, [_rec(now_step, 1), _rec(later, 2)], epoch=3, now=NOW, job="j", operator="op",
               max_future_s=600.0)
    assert d.applied == AppliedStep("p1", 1, "moves", (Move(0, 0, 1),), workers_before=2, workers=2,
                                    bins_before=8, bins=8, map_version_before=0, map_version_after=1)
    assert d.state_after.queue == [QueuedStep(later, "0:2", 3)]
    assert d.warm == {"0": [5]}  # the queued pre-copy step's incoming bin, read from the typed step
    again = EpochControl.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again.applied == d.applied and again.state_after.queue == d.state_after.queue
    assert again.to_dict() == d.to_dict()


# ------------------------------------------------------------------ settings steps ---------------


def _settings(version: int = 0, workers: int = 2, plan: str = "s", **settings: int) -> ControlStep:
    import dataclasses

    from ballast.protocol import Settings

    return dataclasses.replace(_step(plan=plan, moves=(), workers=workers, version=version), kind="settings",
                               settings=Settings(**settings))


def test_a_settings_step_changes_the_settings_and_nothing_else_and_is_one_map_version():
    from ballast.protocol import Settings

    st = initial_state(8, 2)
    d = _run(st, [_settings(trigger_ms=250, max_records_per_epoch=1000)])
    assert d.applied and d.applied.is_settings and not d.applied.is_split and d.applied.moves == ()
    after = d.state_after
    assert after.settings == Settings(250, 1000) and st.settings == Settings(), "input state is not mutated"
    assert after.assignment == st.assignment and after.workers == 2 and after.map_version == 1
    # a later one changes one value and keeps the other
    d2 = _run(after, [_settings(plan="s2", version=1, max_records_per_epoch=0)], epoch=6)
    assert d2.state_after.settings == Settings(250, 0)


def test_the_settings_survive_the_journals_json_and_an_older_journal_has_none():
    from ballast.protocol import Settings
    from spark_jobs.control_state import ControlState

    d = _run(initial_state(8, 2), [_settings(trigger_ms=250)])
    back = EpochControl.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back.state_after.settings == Settings(trigger_ms=250) and back.applied == d.applied
    old = {k: v for k, v in initial_state(8, 2).to_dict().items() if k != "settings"}
    assert ControlState.from_dict(old).settings == Settings()


def test_a_settings_step_that_changes_the_worker_count_is_rejected_whole():
    st = initial_state(8, 2)
    d = _run(st, [_settings(workers=3, trigger_ms=250)])
    assert d.applied is None and d.state_after.settings == st.settings and d.state_after.map_version == 0
    [e] = d.entries
    assert e.action == "reject" and "keeps the worker count" in e.reason and e.checkpoint


# ------------------------------------------------------------------ upgrade steps ----------------


def _upgrade(version: int = 0, workers: int = 2, plan: str = "u", label: str = "2",
             ref: str = "pkg.mod:Counter") -> ControlStep:
    import dataclasses

    from ballast.code_version import CodeVersion

    return dataclasses.replace(_step(plan=plan, moves=(), workers=workers, version=version), kind="upgrade",
                               code=CodeVersion(ref, label))


def _run_checked(st, msgs, check, epoch=5, now=NOW):
    recs = [ControlRecord(f"0:{i}", m.to_json()) for i, m in enumerate(msgs)]
    return decide(st, recs, epoch=epoch, now=now, job="j", operator="keycount", max_future_s=3600,
                  check_code=check)


def test_an_upgrade_is_rejected_by_a_job_that_cannot_judge_code():
    st = initial_state(8, 2)
    d = _run(st, [_upgrade()])
    assert d.applied is None and d.state_after.code == [] and d.state_after.map_version == 0
    [e] = d.entries
    assert e.action == "reject" and e.checkpoint and "takes no live upgrade" in e.reason


def test_the_code_check_judges_an_upgrade_and_its_reason_rejects_it():
    st = initial_state(8, 2)
    seen = []

    def check(step, state):
        seen.append((step.code, state.map_version, state.code))
        return "version 2 does not import on the driver: no module named pkg"

    d = _run_checked(st, [_upgrade()], check)
    assert seen == [(_upgrade().code, 0, [])]
    assert d.applied is None and d.state_after.code == [] and d.state_after.map_version == 0
    [e] = d.entries
    assert (e.action, e.reason) == ("reject", "version 2 does not import on the driver: no module named pkg")
    assert d.state_after.final["u#1"]["status"] == "rejected"


def test_an_upgrade_the_check_accepts_puts_its_code_in_force_as_one_map_version():
    from ballast.code_version import CodeVersion

    st = initial_state(8, 2)
    d = _run_checked(st, [_upgrade()], lambda step, state: None)
    assert d.applied and d.applied.is_upgrade and not d.applied.is_settings and d.applied.kind == "upgrade"
    assert d.applied.moves == () and d.applied.map_version_after == 1
    after = d.state_after
    assert after.code == [CodeVersion("pkg.mod:Counter", "2")] and st.code == [], "input state is not mutated"
    assert after.map_version == 1 and after.assignment == st.assignment and after.workers == 2
    d2 = _run_checked(after, [_upgrade(version=1, plan="u2", label="3", ref="pkg.mod:Counter3")],
                      lambda step, state: None, epoch=6)
    assert [c.version for c in d2.state_after.code] == ["2", "3"] and d2.state_after.map_version == 2


def test_an_upgrade_that_changes_the_worker_count_is_rejected_whole():
    st = initial_state(8, 2)
    d = _run_checked(st, [_upgrade(workers=3)], lambda step, state: None)
    assert d.applied is None and d.state_after.code == [] and d.state_after.workers == 2
    [e] = d.entries
    assert e.action == "reject" and "an upgrade step keeps the worker count (2); the step asks for 3" in e.reason


def test_an_upgrade_while_a_plan_has_a_queued_step_is_rejected_and_does_not_supersede_it():
    st = initial_state(8, 2)
    later = _step(plan="a", moves=((0, 0, 1),), eff=NOW + timedelta(seconds=30))
    d = _run_checked(st, [later, _upgrade()], lambda step, state: None)
    assert d.applied is None and d.state_after.code == []
    assert [(e.plan_id, e.action) for e in d.entries] == [("u", "reject"), ("a", "queue")]
    reject = d.entries[0]
    assert "a migration is under way (plan a has steps queued): upgrade once it has finished" in reject.reason
    assert [q.key for q in d.state_after.queue] == ["a#1"] and d.state_after.plans == ["a"]
    d2 = _run_checked(d.state_after, [], lambda step, state: None, epoch=6, now=NOW + timedelta(seconds=30))
    assert d2.applied and d2.applied.plan_id == "a", "plan a goes on"


def test_an_upgrade_between_two_steps_of_a_flow_controlled_plan_is_rejected():
    st = initial_state(8, 2)
    ok = lambda step, state: None  # noqa: E731
    d = _run_checked(st, [_step(plan="a", step=1, steps=2, moves=((0, 0, 1),))], ok)
    assert d.applied and d.state_after.queue == [], "step 2 is not sent before step 1's checkpoint"
    d2 = _run_checked(d.state_after, [_upgrade(version=1)], ok, epoch=6)
    assert d2.applied is None and d2.state_after.code == []
    [e] = d2.entries
    assert e.action == "reject" and "a migration is under way (plan a applied step 1 of 2)" in e.reason
    d3 = _run_checked(d2.state_after, [_step(plan="a", step=2, steps=2, moves=((1, 0, 1),), version=1)], ok, epoch=7)
    assert d3.applied and (d3.applied.plan_id, d3.applied.step) == ("a", 2), "plan a was not superseded"
    d4 = _run_checked(d3.state_after, [_upgrade(version=2, plan="u2")], ok, epoch=8)
    assert d4.applied and d4.applied.is_upgrade, "once the plan has finished, an upgrade goes in"


def test_unfinished_plan_reads_older_journals_without_the_step_count_as_finished():
    from spark_jobs.control import unfinished_plan

    st = initial_state(8, 2)
    assert unfinished_plan(st, "u") is None
    st.plans = ["a"]
    st.final = {"a#1": {"status": "applied", "epoch": 3, "reason": ""}}  # written before "of" existed
    assert unfinished_plan(st, "u") is None
    st.final["a#1"]["of"] = 2
    assert unfinished_plan(st, "u") == "plan a applied step 1 of 2"
    assert unfinished_plan(st, "a") is None, "a plan is not in its own way"
    st.final["a#1"]["of"] = 1
    assert unfinished_plan(st, "u") is None
    st.final = {"a#1": {"status": "applied", "epoch": 3, "reason": "", "of": 2},
                "a#2": {"status": "rejected", "epoch": 4, "reason": "x", "of": 2}}
    assert unfinished_plan(st, "u") is None, "a plan that ended in a rejection is over"


def test_the_code_in_force_survives_the_journals_json_and_an_older_journal_has_none():
    from ballast.code_version import CodeVersion
    from spark_jobs.control_state import ControlState

    st = initial_state(8, 2)
    assert "code" not in st.to_dict(), "no upgrade: the journal line as before"
    st.code = [CodeVersion("pkg.mod:Counter", "2", ("/tmp/v2.zip",)), CodeVersion("pkg.mod:Counter", "1")]
    doc = json.loads(json.dumps(st.to_dict()))
    assert doc["code"] == [{"ref": "pkg.mod:Counter", "version": "2", "py_files": ["/tmp/v2.zip"]},
                           {"ref": "pkg.mod:Counter", "version": "1"}]
    assert ControlState.from_dict(doc) == st
    old = {k: v for k, v in doc.items() if k != "code"}
    assert ControlState.from_dict(old).code == []


# ------------------------------------------------------------------ shadow upgrades ---------------


def _shadow_upgrade(epochs: int = 2, tolerance: float = 0.0, fields: tuple[str, ...] = (), version: int = 0,
                    plan: str = "u", label: str = "2") -> ControlStep:
    import dataclasses

    from ballast.code_version import CodeVersion, ShadowSpec

    return dataclasses.replace(_step(plan=plan, moves=(), version=version), kind="upgrade",
                               code=CodeVersion("pkg.mod:Counter", label, ("/tmp/v2.zip",),
                                                ShadowSpec(epochs, tolerance, fields)))


def _seen(calls: int = 0, differ: int = 0, errors: int = 0, example: str = "", step: str = "u#1") -> dict:
    """What the tasks of an epoch compared (spark_jobs.live_code.LiveCode.take_seen)."""
    return {step: {"calls": calls, "differ": differ, "errors": errors, "example": example}}


class _Check:
    """A code check that says yes (or `why`) and counts when it was asked."""

    def __init__(self, why: str | None = None) -> None:
        self.why, self.asked = why, 0

    def __call__(self, step: ControlStep, state: object) -> str | None:
        self.asked += 1
        return self.why


def _run_shadow(st, msgs, seen=None, check=None, epoch=5, now=NOW):
    recs = [ControlRecord(f"0:{i}", m.to_json()) for i, m in enumerate(msgs)]
    return decide(st, recs, epoch=epoch, now=now, job="j", operator="keycount", max_future_s=3600,
                  check_code=_Check() if check is None else check, shadow_seen=seen)


def _progress(epochs: int, of: int, calls: int, differ: int = 0, errors: int = 0) -> str:
    return (f"shadow: {epochs} of {of} epochs with input, {calls} handler calls compared, {differ} differ, "
            f"{errors} raised")


def test_a_shadow_upgrade_is_judged_at_receipt_and_a_reason_rejects_it_before_it_is_tried():
    st = initial_state(8, 2)
    check = _Check("version 2 does not import on the driver: no module named pkg")
    d = _run_shadow(st, [_shadow_upgrade()], check=check)
    assert check.asked == 1
    assert d.applied is None and d.shadow is None and d.state_after.queue == [] and d.state_after.shadow == {}
    [e] = d.entries
    assert (e.action, e.reason, e.checkpoint) == ("reject", check.why, True)
    assert d.state_after.final["u#1"]["status"] == "rejected" and d.state_after.code == []
    d = _run_shadow(st, [_shadow_upgrade(version=3)])
    [e] = d.entries
    assert e.action == "reject" and "map version mismatch" in e.reason and d.state_after.shadow == {}
    none = decide(st, [ControlRecord("0:0", _shadow_upgrade().to_json())], epoch=5, now=NOW, job="j",
                  operator="keycount", max_future_s=3600)
    [e] = none.entries
    assert e.action == "reject" and "takes no live upgrade" in e.reason and none.state_after.shadow == {}


def test_a_shadow_upgrade_is_tried_for_its_epochs_with_input_then_cuts_over():
    from ballast.code_version import CodeVersion

    st = initial_state(8, 2)
    step = _shadow_upgrade(epochs=2, fields=("key", "count"))
    check = _Check()
    d = _run_shadow(st, [step], check=check, epoch=5)
    assert check.asked == 1, "judged at receipt"
    assert d.applied is None and [q.key for q in d.state_after.queue] == ["u#1"] and d.state_after.map_version == 0
    assert d.state_after.shadow == {"u#1": {"epochs": 0, "calls": 0, "differ": 0, "errors": 0, "example": ""}}
    assert d.shadow == {"step": "u#1", "code": step.code.to_dict(), "fields": ["key", "count"]}
    assert d.shadow["code"]["shadow"] == {"epochs": 2, "tolerance": 0.0, "fields": ["key", "count"]}
    assert [(e.action, e.reason, e.checkpoint) for e in d.entries] == [("queue", _progress(0, 2, 0), False)]
    assert st.shadow == {} and st.queue == [], "input state is not mutated"

    d2 = _run_shadow(d.state_after, [], seen=_seen(calls=0), check=check, epoch=6)
    assert d2.state_after.shadow["u#1"]["epochs"] == 0, "an epoch that compared no call does not count"
    assert d2.shadow == d.shadow and d2.applied is None
    assert [(e.action, e.reason) for e in d2.entries] == [("queue", _progress(0, 2, 0))], "progress every epoch"

    d3 = _run_shadow(d2.state_after, [], seen=_seen(calls=4), check=check, epoch=7)
    assert d3.state_after.shadow == {"u#1": {"epochs": 1, "calls": 4, "differ": 0, "errors": 0, "example": ""}}
    assert d2.state_after.shadow["u#1"]["calls"] == 0, "input state is not mutated"
    assert d3.shadow == d.shadow and d3.applied is None
    assert [(e.action, e.reason) for e in d3.entries] == [("queue", _progress(1, 2, 4))]
    assert check.asked == 3, "asked every epoch it waits (spark_jobs.live_code answers from its cache)"

    d4 = _run_shadow(d3.state_after, [], seen=_seen(calls=3), check=check, epoch=8)
    assert d4.applied and d4.applied.is_upgrade and (d4.applied.plan_id, d4.applied.step) == ("u", 1)
    assert d4.applied.map_version_after == 1 and d4.state_after.map_version == 1
    assert check.asked == 4, "and once more when it goes in (one validation per step and epoch)"
    assert d4.state_after.code == [step.code.entry] == [CodeVersion("pkg.mod:Counter", "2", ("/tmp/v2.zip",))]
    assert d4.state_after.code[0].shadow is None, "the history keeps the version, not how it was tried"
    assert d4.shadow is None and d4.state_after.shadow == {} and d4.state_after.queue == []
    [e] = d4.entries
    assert e.action == "apply" and e.checkpoint and e.map_version_after == 1
    assert e.reason == _progress(2, 2, 7) + ": cut over"
    assert d4.state_after.final["u#1"]["reason"] == e.reason and d4.state_after.final["u#1"]["status"] == "applied"
    d5 = _run_shadow(d4.state_after, [], seen=_seen(calls=9), check=check, epoch=9)
    assert d5.entries == [] and d5.state_after.shadow == {} and d5.shadow is None, "a late tally is dropped"


def test_the_cut_over_is_said_after_the_steps_own_reason():
    import dataclasses

    step = dataclasses.replace(_shadow_upgrade(epochs=1), reason="release 2.0")
    d = _run_shadow(initial_state(8, 2), [step])
    d2 = _run_shadow(d.state_after, [], seen=_seen(calls=1), epoch=6)
    [e] = d2.entries
    assert e.action == "apply" and e.reason == "release 2.0; " + _progress(1, 1, 1) + ": cut over"


def test_a_shadow_upgrade_whose_outputs_differ_beyond_its_tolerance_is_rejected_and_the_version_in_force_runs_on():
    from ballast.code_version import CodeVersion

    st = initial_state(8, 2)
    st.code = [CodeVersion("pkg.mod:Counter", "1")]
    d = _run_shadow(st, [_shadow_upgrade(epochs=2, label="2")])
    example = 'key {"key":"a"}: in force [{"count":11}], new [{"count":12}]'
    d2 = _run_shadow(d.state_after, [], seen=_seen(calls=5, differ=1, example=example), epoch=6)
    assert d2.applied is None and d2.shadow is not None, "a difference is judged after the epochs, not at once"
    d3 = _run_shadow(d2.state_after, [], seen=_seen(calls=5, example="a later one"), epoch=7)
    assert d3.applied is None and d3.shadow is None
    assert d3.state_after.code == st.code and d3.state_after.map_version == 0
    assert d3.state_after.queue == [] and d3.state_after.shadow == {}
    [e] = d3.entries
    assert e.action == "reject" and e.checkpoint and e.map_version_after is None
    assert e.reason == (_progress(2, 2, 10, differ=1) + f" (tolerance 0), e.g. {example}: the version in force runs on")
    assert d3.state_after.final["u#1"]["status"] == "rejected"


@pytest.mark.parametrize("tolerance, differ, errors, action", [
    (0.2, 2, 0, "apply"),  # 2 of 10: at the tolerance
    (0.2, 1, 1, "apply"),  # an error counts as a difference
    (0.2, 2, 1, "reject"),
    (0.2, 3, 0, "reject"),
    (0.0, 0, 0, "apply"),
    (0.0, 0, 1, "reject"),
    (1.0, 10, 0, "apply"),
])
def test_the_tolerance_is_the_share_of_calls_that_may_differ_or_raise(tolerance, differ, errors, action):
    d = _run_shadow(initial_state(8, 2), [_shadow_upgrade(epochs=1, tolerance=tolerance)])
    d2 = _run_shadow(d.state_after, [], seen=_seen(calls=10, differ=differ, errors=errors, example="x"), epoch=6)
    [e] = d2.entries
    assert e.action == action and e.checkpoint
    assert (d2.applied is not None) == (action == "apply") and d2.state_after.shadow == {}
    assert _progress(1, 1, 10, differ, errors) in e.reason


def test_the_tasks_tallies_count_for_the_step_they_name_only():
    d = _run_shadow(initial_state(8, 2), [_shadow_upgrade(epochs=1)])
    d2 = _run_shadow(d.state_after, [], seen={**_seen(calls=3, step="other#1"), **_seen(calls=0)}, epoch=6)
    assert d2.state_after.shadow == {"u#1": {"epochs": 0, "calls": 0, "differ": 0, "errors": 0, "example": ""}}
    assert d2.applied is None and d2.shadow is not None
    d3 = _run_shadow(d2.state_after, [], seen=_seen(calls=2, differ=1, example="first"), epoch=7)
    assert d3.entries[0].action == "reject" and "e.g. first:" in d3.entries[0].reason


def test_the_first_example_is_kept():
    from spark_jobs.control import add_seen

    t = add_seen({}, {})
    assert t == {"epochs": 0, "calls": 0, "differ": 0, "errors": 0, "example": ""}
    t = add_seen(t, {"calls": 2, "differ": 1, "example": "first"})
    t = add_seen(t, {"calls": 1, "errors": 1, "example": "second"})
    assert t == {"epochs": 2, "calls": 3, "differ": 1, "errors": 1, "example": "first"}
    assert add_seen({}, {"calls": 1, "example": "x\x00" * 500})["example"] == "x\\x00" * 59 + "x\\x0…", (
        "an example from the tasks is clipped to 300 safe characters")


def test_a_shadow_upgrade_not_yet_due_is_not_tried_but_its_progress_is_logged():
    import dataclasses

    st = initial_state(8, 2)
    later = NOW + timedelta(seconds=60)
    step = dataclasses.replace(_shadow_upgrade(epochs=1), effective_at=later)
    d = _run_shadow(st, [step])
    assert d.shadow is None and "u#1" in d.state_after.shadow
    d2 = _run_shadow(d.state_after, [], epoch=6)
    assert d2.shadow is None
    assert [(e.action, e.reason) for e in d2.entries] == [("queue", f"queued until effective_at {later.isoformat()}")]
    d3 = _run_shadow(d2.state_after, [], epoch=7, now=later)
    assert d3.shadow is not None and d3.shadow["step"] == "u#1" and d3.applied is None


def test_the_shadow_survives_the_journals_json_and_an_older_journal_has_none():
    from spark_jobs.control_state import ControlState

    d = _run_shadow(initial_state(8, 2), [_shadow_upgrade(epochs=3, tolerance=0.25, fields=("count",))])
    d2 = _run_shadow(d.state_after, [], seen=_seen(calls=2, differ=1, example="e"), epoch=6)
    doc = json.loads(json.dumps(d2.to_dict()))
    assert doc["shadow"] == d2.shadow and doc["state_after"]["shadow"] == d2.state_after.shadow
    back = EpochControl.from_dict(doc)
    assert back.shadow == d2.shadow and back.state_after == d2.state_after and back.to_dict() == d2.to_dict()
    assert back.state_after.queue[0].step.code.shadow == d.state_after.queue[0].step.code.shadow
    d3 = _run_shadow(back.state_after, [], seen=_seen(calls=1), epoch=7)
    assert d3.state_after.shadow["u#1"] == {"epochs": 2, "calls": 3, "differ": 1, "errors": 0, "example": "e"}
    plain = _run(initial_state(8, 2), [_step()])
    assert "shadow" not in plain.to_dict() and "shadow" not in plain.to_dict()["state_after"], (
        "no shadow: the journal line as before")
    old = plain.to_dict()
    assert EpochControl.from_dict(old).shadow is None and EpochControl.from_dict(old).state_after.shadow == {}
    assert ControlState.from_dict(initial_state(8, 2).to_dict()).shadow == {}


def test_another_upgrade_during_a_shadow_is_rejected_and_the_shadow_goes_on():
    d = _run_shadow(initial_state(8, 2), [_shadow_upgrade(epochs=1)])
    d2 = _run_shadow(d.state_after, [_shadow_upgrade(plan="u2", label="3"), _upgrade(plan="u3", label="4")],
                     seen=_seen(calls=0), epoch=6)
    assert [(e.plan_id, e.action) for e in d2.entries] == [("u2", "reject"), ("u3", "reject"), ("u", "queue")]
    for e in d2.entries[:2]:
        assert "a migration is under way (plan u has steps queued): upgrade once it has finished" in e.reason
    assert list(d2.state_after.shadow) == ["u#1"] and d2.shadow is not None and d2.shadow["step"] == "u#1"
    assert d2.state_after.plans == ["u"]
    d3 = _run_shadow(d2.state_after, [], seen=_seen(calls=1), epoch=7)
    assert d3.applied and d3.applied.plan_id == "u"


def test_a_newer_plans_step_during_a_shadow_supersedes_it():
    """What happens today: only an upgrade is held off by a queued plan; a newer plan of moves (or
    settings) supersedes every queued step of older plans, the shadow upgrade too, its tally dropped."""
    d = _run_shadow(initial_state(8, 2), [_shadow_upgrade(epochs=3)])
    d2 = _run_shadow(d.state_after, [], seen=_seen(calls=5), epoch=6)
    d3 = _run_shadow(d2.state_after, [_step(plan="b", moves=((0, 0, 1),))], seen=_seen(calls=5), epoch=7)
    assert [(e.plan_id, e.action) for e in d3.entries] == [("u", "supersede"), ("b", "apply")]
    assert d3.entries[0].reason == "superseded by newer plan b" and d3.entries[0].checkpoint
    assert d3.state_after.final["u#1"]["status"] == "superseded"
    assert d3.state_after.shadow == {} and d3.shadow is None and d3.state_after.code == []
    assert d3.applied and d3.applied.plan_id == "b" and d3.state_after.map_version == 1


def test_a_duplicate_of_a_shadow_upgrade_changes_nothing():
    step = _shadow_upgrade(epochs=2)
    d = _run_shadow(initial_state(8, 2), [step])
    d2 = _run_shadow(d.state_after, [step], seen=_seen(calls=1), epoch=6)
    assert [(e.action, e.reason) for e in d2.entries] == [("duplicate", "duplicate: already queued"),
                                                          ("queue", _progress(1, 2, 1))]
    assert d2.state_after.shadow["u#1"]["calls"] == 1


def test_a_new_version_that_raises_on_every_call_is_rejected_after_its_epochs():
    d = _run_shadow(initial_state(8, 2), [_shadow_upgrade(epochs=2)])
    st = d.state_after
    for epoch in range(6, 16):
        d = _run_shadow(st, [], seen=_seen(calls=4, errors=4, example="the new version raised KeyError"), epoch=epoch)
        st = d.state_after
        if not st.queue:
            break
    [e] = d.entries
    assert e.action == "reject" and "e.g. the new version raised KeyError" in e.reason


def test_an_upgrade_waits_while_its_code_is_checked_beside_the_epochs_then_applies():
    """The code check runs in a thread (spark_jobs.live_code): while it answers CODE_CHECK_PENDING the step
    stays queued with that note, and the epoch it answers in applies it; a shadow starts only then."""
    from spark_jobs.control import CODE_CHECK_PENDING

    st = initial_state(8, 2)
    check = _Check(CODE_CHECK_PENDING)
    d = _run_shadow(st, [_shadow_upgrade(epochs=1)], check=check)
    assert d.applied is None and d.shadow is None, "nothing is tried before the code imports everywhere"
    assert [q.key for q in d.state_after.queue] == ["u#1"]
    d = _run_shadow(d.state_after, [], check=check, epoch=6)
    assert d.applied is None and d.shadow is None and [q.key for q in d.state_after.queue] == ["u#1"]
    check.why = None  # the thread answered: it can go into force
    d = _run_shadow(d.state_after, [], check=check, epoch=7)
    assert d.shadow is not None and d.applied is None, "now tried"
    d = _run_shadow(d.state_after, [], seen=_seen(calls=2), check=check, epoch=8)
    assert d.applied is not None and d.applied.is_upgrade
