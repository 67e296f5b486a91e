"""ballast.store.step_log: the first epoch at which the job logged an action for a step of a plan,
per (job, operator, plan), or None when it never did; a handover step's logged progress."""

from __future__ import annotations

import pytest

from ballast.store import writer
from ballast.store.step_log import first_decision_epoch, handover_record, latest_handover
from tests.helpers.store_seed import (
    JOB,
    NOON_MS,
    OP,
    Entry,
    handover_applied,
    handover_progress,
    log_waiting_handover,
)

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


def test_a_handovers_progress_per_epoch_and_its_checkpoint(any_db: str) -> None:
    """The console reads the job's newest waiting handover and, per epoch it waited, the progress the job
    logged (oldest first), then its checkpoint; queue rows of other steps, operators or without a
    progress payload are not a handover's."""
    assert latest_handover(any_db, JOB, OP) is None and handover_record(any_db, JOB, OP, "p1", 1) is None
    log_waiting_handover(any_db, "p1", 1, [4, 5, 6], [None, NOON_MS + 9_000, NOON_MS + 13_200])
    writer.write_step_decisions(any_db, JOB, OP, 7, [Entry(0, "p2", 1, "queue", "waits for step 0 of plan p2")])
    log_waiting_handover(any_db, "p9", 1, [8], [NOON_MS], operator="wordcount")
    # logged before the progress payload existed: the reason alone is not enough to show it
    writer.write_step_decisions(any_db, JOB, OP, 2, [Entry(0, "old", 1, "queue", "handover: both owners get ...")])
    assert latest_handover(any_db, JOB, OP) == ("p1", 1)
    assert handover_record(any_db, JOB, OP, "old", 1) is None and handover_record(any_db, JOB, OP, "p2", 1) is None
    rec = handover_record(any_db, JOB, OP, "p1", 1)
    assert rec is not None and rec.epochs == (4, 5, 6) and rec.checkpoint is None
    assert [p["watermark"] for p in rec.progress] == [None, NOON_MS + 9_000, NOON_MS + 13_200]
    assert rec.progress[-1] == handover_progress(4, NOON_MS + 13_200) and rec.progress[-1]["windows_left"] == 1
    assert handover_record(any_db, JOB, OP, "p1", 1, limit=2).epochs == (5, 6)  # type: ignore[union-attr]

    handover_applied(any_db, "p1", 1, 7)  # the apply row replaces epoch 7's log: p2's queue row with it
    rec = handover_record(any_db, JOB, OP, "p1", 1)
    assert rec is not None and rec.epochs == (4, 5, 6)
    assert rec.checkpoint is not None and (rec.checkpoint.status, rec.checkpoint.bytes_moved) == ("applied", 0)
    assert "handover complete" in rec.checkpoint.reason
    log_waiting_handover(any_db, "p3", 2, [9], [NOON_MS])
    assert latest_handover(any_db, JOB, OP) == ("p3", 2)
    assert latest_handover(any_db, JOB, "wordcount") == ("p9", 1)
