"""ballast.store.decisions: each DS2 decision is stored with its inputs, the latest is the newest by
decision time (then by id), per (job, operator), and links to the plan it led to."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ballast.store.decisions import latest_decision, link_decision, save_decision
from tests.helpers.store_seed import JOB, OP, T0

pytestmark = pytest.mark.store


def _save(url: str, action: str, at_s: float, operator: str = OP, **inputs: object) -> int:
    return save_decision(url, JOB, operator, current_workers=2, proposed_workers=3, target_workers=3, action=action,
                         reason=f"why {action}", inputs=inputs, at=T0 + timedelta(seconds=at_s))


def test_none_until_a_decision_is_saved(any_db: str) -> None:
    assert latest_decision(any_db, JOB, OP) is None


def test_the_latest_is_the_newest_by_time_then_id_and_keeps_its_inputs(any_db: str) -> None:
    later = _save(any_db, "scale_up", 60, guard_state={"history": [3, 3]}, utilization=0.93)
    earlier = _save(any_db, "no_change", 0)  # saved after, decided before
    assert later != earlier
    d = latest_decision(any_db, JOB, OP)
    assert d is not None and (d.id, d.action, d.reason) == (later, "scale_up", "why scale_up")
    assert (d.current_workers, d.proposed_workers, d.target_workers) == (2, 3, 3)
    assert d.inputs == {"guard_state": {"history": [3, 3]}, "utilization": 0.93} and d.plan_id is None
    assert d.decided_at == T0 + timedelta(seconds=60) and d.decided_at.tzinfo is not None
    tie = _save(any_db, "rebalance", 60)  # the same instant: the later row wins
    assert latest_decision(any_db, JOB, OP).id == tie  # type: ignore[union-attr]


def test_decisions_are_per_operator_and_link_to_their_plan(any_db: str) -> None:
    mine = _save(any_db, "scale_up", 0)
    _save(any_db, "scale_down", 10, operator="wordcount")
    assert latest_decision(any_db, JOB, OP).action == "scale_up"  # type: ignore[union-attr]
    link_decision(any_db, mine, "plan-7")
    assert latest_decision(any_db, JOB, OP).plan_id == "plan-7"  # type: ignore[union-attr]
    assert latest_decision(any_db, JOB, "wordcount").plan_id is None  # type: ignore[union-attr]
    link_decision(any_db, 10_000, "plan-8")  # no such decision: nothing changes
    assert latest_decision(any_db, JOB, OP).plan_id == "plan-7"  # type: ignore[union-attr]
