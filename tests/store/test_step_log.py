"""ballast.store.step_log: the first epoch at which the job logged an action for a step of a plan,
per (job, operator, plan), or None when it never did."""

from __future__ import annotations

import pytest

from ballast.store import writer
from ballast.store.step_log import first_decision_epoch
from tests.helpers.store_seed import JOB, OP, Entry

pytestmark = pytest.mark.store


def test_the_first_epoch_of_an_action_for_a_plan(any_db: str) -> None:
    assert first_decision_epoch(any_db, JOB, OP, "p1", "queue") is None
    writer.write_step_decisions(any_db, JOB, OP, 7, [Entry(0, "p1", 2, "queue"), Entry(1, "p2", 1, "queue")])
    writer.write_step_decisions(any_db, JOB, OP, 5, [Entry(0, "p1", 1, "queue")])  # logged later, earlier epoch
    writer.write_step_decisions(any_db, JOB, OP, 8, [Entry(0, "p1", 1, "apply"), Entry(1, "p1", 2, "reject")])
    writer.write_step_decisions(any_db, JOB, "wordcount", 2, [Entry(0, "p1", 1, "queue", operator="wordcount")])
    assert first_decision_epoch(any_db, JOB, OP, "p1", "queue") == 5
    assert first_decision_epoch(any_db, JOB, OP, "p1", "apply") == 8
    assert first_decision_epoch(any_db, JOB, OP, "p2", "queue") == 7
    assert first_decision_epoch(any_db, JOB, OP, "p2", "apply") is None
    assert first_decision_epoch(any_db, JOB, "wordcount", "p1", "queue") == 2
    assert first_decision_epoch(any_db, "other", OP, "p1", "queue") is None


def test_a_replayed_epoch_replaces_its_log(any_db: str) -> None:
    writer.write_step_decisions(any_db, JOB, OP, 4, [Entry(0, "p1", 1, "queue")])
    writer.write_step_decisions(any_db, JOB, OP, 4, [Entry(0, "p1", 1, "apply")])  # the replay decided otherwise
    assert first_decision_epoch(any_db, JOB, OP, "p1", "queue") is None
    assert first_decision_epoch(any_db, JOB, OP, "p1", "apply") == 4
