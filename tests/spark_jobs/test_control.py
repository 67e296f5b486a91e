"""spark_jobs.control's typed hand-offs: the queue and the applied step are the protocol's objects
from parse to apply, and the journal's JSON keeps the shape it had when they were dicts, so a
checkpoint written before the types existed still loads."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from ballast.protocol import ControlStep, Move
from spark_jobs.control import AppliedStep, ControlRecord, EpochControl, QueuedStep, decide, initial_state

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _step(step: int, steps: int, moves: tuple[Move, ...], version: int, *, later: float = 0.0,
          precopy: bool = False) -> ControlStep:
    return ControlStep("j", "op", "p1", step, steps, "moves", moves, 2, version, NOW,
                       NOW + timedelta(seconds=later), precopy=precopy)


def _rec(s: ControlStep, off: int) -> ControlRecord:
    return ControlRecord(f"0:{off}", s.to_json())


def test_decide_hands_typed_steps_to_the_runner_and_the_journal_round_trips_them():
    st = initial_state(8, 2)
    now_step = _step(1, 2, (Move(0, 0, 1),), 0)
    later = _step(2, 2, (Move(5, 1, 0),), 1, later=60.0, precopy=True)
    d = decide(st, [_rec(now_step, 1), _rec(later, 2)], epoch=3, now=NOW, job="j", operator="op",
               max_future_s=600.0)
    assert d.applied == AppliedStep("p1", 1, "moves", (Move(0, 0, 1),), workers_before=2, workers=2,
                                    bins_before=8, bins=8, map_version_before=0, map_version_after=1)
    assert d.state_after.queue == [QueuedStep(later, "0:2", 3)]
    assert d.warm == {"0": [5]}  # the queued pre-copy step's incoming bin, read from the typed step
    again = EpochControl.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again.applied == d.applied and again.state_after.queue == d.state_after.queue
    assert again.to_dict() == d.to_dict()


def test_a_journal_line_written_when_the_queue_held_dicts_still_loads():
    msg = _step(2, 2, (Move(5, 1, 0),), 1).to_dict()
    old = {"epoch": 4, "decided_at": NOW.isoformat(), "entries": [], "map_version_before": 0, "workers_before": 2,
           "state_after": {"map_version": 1, "workers": 2, "assignment": [1, 0, 0, 0, 1, 1, 1, 1],
                           "queue": [{"msg": msg, "offset": "0:7", "epoch": 4}], "final": {}, "plans": ["p1"]},
           "applied": {"plan_id": "p1", "step": 1, "kind": "moves", "moves": [[0, 0, 1]], "workers_before": 2,
                       "workers": 2, "bins_before": 8, "bins": 8, "map_version_before": 0, "map_version_after": 1},
           "warm": {}}
    d = EpochControl.from_dict(old)
    assert d.applied is not None and d.applied.moves == (Move(0, 0, 1),) and not d.applied.is_split
    assert d.state_after.queue[0].step.moves == (Move(5, 1, 0),) and d.state_after.queue[0].offset == "0:7"
    assert d.to_dict() == old
