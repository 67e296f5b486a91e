"""spark_jobs.control_handover through `decide`: a handover step fixes its timestamps at the first
epoch it is due, waits while both owners get the bins' rows, and applies once the epoch before ran
its timers at a watermark past the boundary; session windows also wait until the new owners report
no key open (read back from the manifest's objects, as a restarted driver does); it is refused
without declared windows and with a worker change; superseded, it ends the overlap; the state
round-trips the journal's JSON."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from ballast.policy.handover import Handover, WindowSpec
from spark_jobs.control import ControlRecord, decide, has_due_step
from spark_jobs.control_handover import HandoverClock, clock_for
from spark_jobs.control_state import ControlState, EpochControl, initial_state
from spark_jobs.durable import DurableState
from spark_jobs.handover import BinHandover, from_decision
from spark_jobs.objects import ObjectWriter, epoch_name, object_name
from tests.helpers.control import control_step

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
SLIDING = WindowSpec(10_000, 5_000)
EVENT_MAX = 1_700_000_007_300  # the job has read event times up to 12:00:07.300 of some minute


def _handover(**kw):
    return dataclasses.replace(control_step(moves=((0, 0, 1), (1, 0, 1))), handover=True, **kw)


def _run(st, msgs, epoch, clock):
    recs = [ControlRecord(f"0:{i}", m.to_json()) for i, m in enumerate(msgs)]
    return decide(st, recs, epoch=epoch, now=NOW, job="j", operator="keycount", max_future_s=3600,
                  handover_clock=clock)


def test_a_handover_waits_with_its_timestamps_then_applies_past_the_boundary():
    h = Handover.at(SLIDING, EVENT_MAX + 1)
    d1 = _run(initial_state(8, 2), [_handover()], 5, HandoverClock(SLIDING, EVENT_MAX, None))
    assert d1.applied is None and d1.state_after.map_version == 0
    assert d1.state_after.handover["p#1"] == {"since": 5, "migration": h.migration_ms, "activation": h.activation_ms,
                                              "boundary": h.boundary_ms}
    [e] = d1.entries
    assert e.action == "queue" and e.reason.startswith("handover:") and str(h.boundary_ms) in e.reason
    assert from_decision(d1.handover) == (BinHandover(0, 0, 1, 5, h.activation_ms, h.boundary_ms),
                                          BinHandover(1, 0, 1, 5, h.activation_ms, h.boundary_ms))
    assert not has_due_step(d1.state_after, NOW), "a waiting handover needs input, not ticks"
    assert not has_due_step(d1.state_after, NOW, HandoverClock(SLIDING, EVENT_MAX, h.boundary_ms - 1))
    assert has_due_step(d1.state_after, NOW, HandoverClock(SLIDING, EVENT_MAX, h.boundary_ms)), (
        "once the last epoch's timers ran past the boundary, a tick applies it (the input may have stopped)")

    # the epoch before ran its timers short of the boundary: still waiting, one progress entry that
    # carries the handover to the console (both owners, the timestamps, the old owner's open windows)
    d2 = _run(d1.state_after, [], 6, HandoverClock(SLIDING, EVENT_MAX + 20_000, h.boundary_ms - 1))
    assert d2.applied is None and [e.action for e in d2.entries] == ["queue"]
    assert d2.entries[0].handover == {"since": 5, "migration": h.migration_ms, "activation": h.activation_ms,
                                      "boundary": h.boundary_ms, "moves": [[0, 0, 1], [1, 0, 1]],
                                      "watermark": h.boundary_ms - 1, "windows_left": 1}
    assert d1.entries[0].handover is not None and d1.entries[0].handover["windows_left"] is None
    assert all(not b.completes for b in from_decision(d2.handover))

    # ... and at the boundary: the step applies, the bins' handover completes in this epoch
    d3 = _run(d2.state_after, [], 7, HandoverClock(SLIDING, EVENT_MAX + 30_000, h.boundary_ms))
    assert d3.applied is not None and d3.state_after.assignment[:2] == [1, 1]
    assert "handover complete" in d3.entries[0].reason and d3.entries[0].checkpoint
    assert [b.completes for b in from_decision(d3.handover)] == [True, True]
    assert d3.state_after.handover == {} and not d3.state_after.queue


def test_a_handover_does_not_complete_in_its_first_epoch():
    h = Handover.at(SLIDING, EVENT_MAX + 1)
    d = _run(initial_state(8, 2), [_handover()], 5, HandoverClock(SLIDING, EVENT_MAX, h.boundary_ms + 99_000))
    assert d.applied is None and "p#1" in d.state_after.handover


@pytest.mark.parametrize("clock, step, why", [
    (HandoverClock(None, EVENT_MAX, None), _handover(), "declares its windows"),
    (None, _handover(), "declares its windows"),
    (HandoverClock(SLIDING, EVENT_MAX, None), _handover(workers=3), "keeps the worker count"),
])
def test_a_handover_the_data_plane_cannot_do_is_refused_with_its_reason(clock, step, why):
    d = _run(initial_state(8, 2), [step], 5, clock)
    assert d.applied is None and d.state_after.handover == {}
    [e] = d.entries
    assert e.action == "reject" and why in e.reason and e.checkpoint


def test_a_handover_before_any_event_moves_the_empty_bins_at_once():
    d = _run(initial_state(8, 2), [_handover()], 0, HandoverClock(SLIDING, None, None))
    assert d.applied is not None and d.state_after.assignment[:2] == [1, 1]
    assert "read no event yet" in d.entries[0].reason and d.handover is None


def test_a_newer_plan_is_refused_while_a_handover_of_grid_windows_is_open():
    """The old owner folds no row past its boundary, so an open handover of grid windows cannot be
    cancelled: a newer plan is refused with the watermark to wait for, the handover completes, and
    a plan sent after it applies."""
    h = Handover.at(SLIDING, EVENT_MAX + 1)
    d1 = _run(initial_state(8, 2), [_handover()], 5, HandoverClock(SLIDING, EVENT_MAX, None))
    d2 = _run(d1.state_after, [control_step(plan="q", moves=((7, 1, 0),))], 6, HandoverClock(SLIDING, EVENT_MAX, None))
    assert d2.state_after.final["q#1"]["status"] == "rejected" and "p#1" not in d2.state_after.final
    assert f"plan again once it completes, when the watermark reaches {h.boundary_ms} ms" in \
        d2.state_after.final["q#1"]["reason"]
    assert [q.key for q in d2.state_after.queue] == ["p#1"] and d2.handover is not None
    d3 = _run(d2.state_after, [], 7, HandoverClock(SLIDING, EVENT_MAX + 30_000, h.boundary_ms))
    assert d3.state_after.final["p#1"]["status"] == "applied" and d3.state_after.handover == {}
    d4 = _run(d3.state_after, [control_step(plan="r", moves=((7, 1, 0),), version=1)], 8,
              HandoverClock(SLIDING, EVENT_MAX + 30_000, h.boundary_ms))
    assert d4.applied is not None and d4.applied.plan_id == "r"


def test_a_newer_plan_supersedes_an_open_session_handover_and_ends_its_overlap():
    """A session handover may wait without bound, and its old owner folds every row: a newer plan
    supersedes it, and the old owner keeps the whole bin."""
    sessions = WindowSpec(0, gap_ms=2_000)
    d1 = _run(initial_state(8, 2), [_handover()], 5, HandoverClock(sessions, EVENT_MAX, None))
    newer = control_step(plan="q", moves=((7, 1, 0),))
    d2 = _run(d1.state_after, [newer], 6, HandoverClock(sessions, EVENT_MAX, None))
    assert d2.state_after.final["p#1"]["status"] == "superseded"
    assert d2.state_after.handover == {} and d2.handover is None, "no bin goes to two owners any more"
    assert d2.applied is not None and d2.applied.plan_id == "q"


def test_the_handover_state_round_trips_the_journal():
    d = _run(initial_state(8, 2), [_handover()], 5, HandoverClock(SLIDING, EVENT_MAX, None))
    back = EpochControl.from_dict(d.to_dict())
    assert back.state_after.handover == d.state_after.handover and back.handover == d.handover
    assert back.state_after.queue[0].step.handover
    old = d.state_after.to_dict()
    old.pop("handover")
    assert ControlState.from_dict(old).handover == {}, "a journal from before handovers still loads"


def _durable(tmp_path, reports: dict[int, dict[int, dict[str, int]]]) -> DurableState:
    """A durable state whose committed epochs' tasks reported these open keys: epoch -> worker -> bin -> n."""
    ds = DurableState(str(tmp_path / "state"), "j", 8)
    ds.record_map(0, initial_state(8, 2).assignment)
    for e, by_worker in sorted(reports.items()):
        for w in range(2):
            metrics: dict = {"worker": w, "max_event_ms": EVENT_MAX}
            if w in by_worker:
                metrics["handover_open"] = by_worker[w]
            obj = ObjectWriter(meta={"epoch": e, "worker": w, "attempt": "a", "kind": "changelog", "metrics": metrics})
            (ds.loc / "changelog" / epoch_name(e) / object_name(w, "a")).write_bytes(obj.to_bytes())
        ds.commit_epoch(e, 0, 2, False)
    return ds


def test_the_runner_clock_reads_the_watermark_of_the_epoch_before(tmp_path):
    seen: list[int] = []

    def watermark_of(e: int) -> int:
        seen.append(e)
        return 7

    ds = _durable(tmp_path, {10: {}})
    c = clock_for(SLIDING, lambda: ds, watermark_of)(12)
    assert c == HandoverClock(SLIDING, EVENT_MAX, 7) and seen == [11] and c.open_keys is None
    assert clock_for(SLIDING, lambda: None, watermark_of)(12).event_max_ms is None, "before the state is bound"


SESSIONS = WindowSpec(0, gap_ms=3_000)


def test_a_session_handover_waits_for_the_keys_the_new_owner_reports_open(tmp_path):
    """Apply needs the timers run past F + gap AND no key open in the step's bins, as the new owner's
    task of the latest epoch that ran tasks reported it; a restarted driver reads the same reports
    from the manifest's objects."""
    h = Handover.at(SESSIONS, EVENT_MAX + 1)
    wm = {e: h.boundary_ms + e for e in range(20)}  # every epoch ran its timers past the boundary
    reports = {6: {1: {"0": 3, "1": 1, "5": 9}}, 7: {1: {"0": 0, "1": 1}}, 9: {1: {"0": 0, "1": 0}}}
    ds = _durable(tmp_path, {4: {1: {"0": 7}}, **reports})  # epoch 4: before the step (another handover's)
    clock = clock_for(SESSIONS, lambda: ds, wm.get)
    d5 = _run(initial_state(8, 2), [_handover()], 5, clock(5))
    ho = d5.state_after.handover["p#1"]
    assert ho == {"since": 5, "migration": h.migration_ms, "activation": h.activation_ms, "boundary": h.boundary_ms,
                  "gap": 3_000}
    assert from_decision(d5.handover)[0] == BinHandover(0, 0, 1, 5, h.activation_ms, h.boundary_ms, False,
                                                        EVENT_MAX + 1), "the tasks get F: the new owner folds from it"
    assert from_decision(d5.handover)[0].folds_from_ms == EVENT_MAX + 1
    assert "sessions that start before" in d5.entries[0].reason and "not known yet" in d5.entries[0].reason
    d6 = _run(d5.state_after, [], 6, clock(6))  # the latest report (epoch 4) is from before the step: none open
    assert d6.applied is not None, "no task ran since the step: no row reached the bins, nothing is open"
    d6 = _run(d5.state_after, [], 7, clock(7))  # epoch 6: bins 0 and 1 have 4 keys open (bin 5 is not the step's)
    assert d6.applied is None and "keys still holding it open: 4 keys" in d6.entries[0].reason
    assert "never goes quiet keeps the handover open" in d6.entries[0].reason
    assert d6.entries[0].handover is not None and d6.entries[0].handover["keys_open"] == 4
    assert not has_due_step(d6.state_after, NOW, clock(7))
    d8 = _run(d6.state_after, [], 8, clock(8))
    assert d8.applied is None and "1 key (" in d8.entries[0].reason
    # epoch 8 ran no task (no input, nothing due): epoch 7's report still holds at 9; epoch 9's says none
    assert _run(d8.state_after, [], 9, clock(9)).applied is None
    assert has_due_step(d8.state_after, NOW, clock(10)), "the job ticks for the epoch that applies it"
    d10 = _run(d8.state_after, [], 10, clock(10))
    assert d10.applied is not None and "every session the old owner started before" in d10.entries[0].reason
    assert [b.completes for b in from_decision(d10.handover)] == [True, True]
    # a restarted driver reads the same reports back (no memo): the same decisions
    fresh = clock_for(SESSIONS, lambda: DurableState(str(tmp_path / "state"), "j", 8), wm.get)
    assert _run(d8.state_after, [], 9, fresh(9)).applied is None and _run(d8.state_after, [], 10, fresh(10)).applied
    # short of the boundary, no key open is not enough
    short = clock_for(SESSIONS, lambda: ds, lambda e: h.boundary_ms - 1)
    assert _run(d8.state_after, [], 10, short(10)).applied is None
