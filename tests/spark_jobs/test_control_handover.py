"""spark_jobs.control_handover through `decide`: a handover step fixes its timestamps at the first
epoch it is due, waits while both owners get the bins' rows, and applies once the epoch before ran
its timers at a watermark past the boundary; it is refused without declared windows, for session
windows and with a worker change; superseded, it ends the overlap; the state round-trips the
journal's JSON."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from ballast.policy.handover import Handover, WindowSpec
from spark_jobs.control import ControlRecord, decide, has_due_step
from spark_jobs.control_handover import HandoverClock, clock_for
from spark_jobs.control_state import ControlState, EpochControl, initial_state
from spark_jobs.handover import BinHandover, from_decision
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
    (HandoverClock(WindowSpec(0, gap_ms=30_000), EVENT_MAX, None), _handover(), "session windows"),
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


def test_a_newer_plan_supersedes_an_open_handover_and_ends_its_overlap():
    d1 = _run(initial_state(8, 2), [_handover()], 5, HandoverClock(SLIDING, EVENT_MAX, None))
    newer = control_step(plan="q", moves=((7, 1, 0),))
    d2 = _run(d1.state_after, [newer], 6, HandoverClock(SLIDING, EVENT_MAX, None))
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


def test_the_runner_clock_reads_the_watermark_of_the_epoch_before():
    seen: list[int] = []

    def watermark_of(e: int) -> int:
        seen.append(e)
        return 7

    c = clock_for(SLIDING, lambda e: e * 10, watermark_of)(12)
    assert c == HandoverClock(SLIDING, 120, 7) and seen == [11]
