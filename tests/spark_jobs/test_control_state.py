"""spark_jobs.control_state: a journal line written when the queue held plain dicts (before the typed
steps) still loads into the typed state and decision, and writes back the same JSON. Fast: no
services (the decisions that produce these records: test_control.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ballast.protocol import ControlStep, Move
from spark_jobs.control_state import EpochControl

pytestmark = pytest.mark.dataplane
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def test_a_journal_line_written_when_the_queue_held_dicts_still_loads():
    msg = ControlStep("j", "op", "p1", 2, 2, "moves", (Move(5, 1, 0),), 2, 1, NOW, NOW).to_dict()
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
