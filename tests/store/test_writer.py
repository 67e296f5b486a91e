"""The data plane's epoch commit through ballast.store.writer: idempotent per epoch, one transaction."""

from __future__ import annotations

import pytest

from ballast.errors import BallastError
from ballast.store import JobStore, writer
from tests.helpers.store_seed import BINS, JOB, OP, T0, Entry, applied, commit_epoch

pytestmark = pytest.mark.store


def test_replayed_epoch_replaces_its_rows(any_db: str) -> None:
    commit_epoch(any_db, 1, records=10)
    commit_epoch(any_db, 1, records=30)  # the replay of epoch 1 after a driver restart
    store = JobStore(any_db, JOB, OP)
    [e] = store.epoch_metrics()
    assert e.input_rows == 30 * BINS
    assert [(w.epoch, w.worker) for w in store.worker_metrics()] == [(1, 0), (1, 1)]
    assert store.bin_stats(BINS, 5).load == (30.0,) * BINS


def test_checkpoint_and_event_written_once(any_db: str) -> None:
    commit_epoch(any_db, 1, checkpoint=applied("p1", 1, 1), event="bad signature")
    commit_epoch(any_db, 1, checkpoint=applied("p1", 1, 1), event="bad signature")
    store = JobStore(any_db, JOB, OP)
    assert list(store.checkpoints("p1")) == [1]
    assert [ev.message for ev in store.events()] == ["bad signature"]
    with writer.epoch_transaction(any_db) as s:
        assert writer.existing_checkpoint(s, JOB, OP, "p1", 1) is not None
        assert writer.existing_checkpoint(s, JOB, OP, "p1", 2) is None


def test_epoch_transaction_is_all_or_nothing(any_db: str) -> None:
    """A failure after the checkpoint is added leaves neither it nor the epoch's metrics."""
    class Boom(BallastError, RuntimeError):
        pass

    with pytest.raises(Boom), writer.epoch_transaction(any_db) as s:
        writer.ensure_routing_map(s, JOB, OP, 0, 1, 1, [0] * BINS, T0, None, None)
        writer.insert_checkpoint_once(s, applied("p1", 1, 1))
        raise Boom("the driver died mid-commit")
    store = JobStore(any_db, JOB, OP)
    assert store.checkpoints("p1") == {}
    assert store.latest_map() is None


def test_job_row_and_step_log(any_db: str) -> None:
    writer.ensure_job_row(any_db, JOB, OP, BINS, {"a": 1}, T0)
    writer.ensure_job_row(any_db, JOB, OP, BINS, {"a": 2}, T0)  # a restart updates the config
    with pytest.raises(writer.BinsMismatch, match="this start has 16: start it with --bins 8"):
        writer.ensure_job_row(any_db, JOB, OP, 16, {}, T0)
    writer.write_step_decisions(any_db, JOB, OP, 3, [Entry(0, "p1", 1, "queue")])
    writer.write_step_decisions(any_db, JOB, OP, 4, [Entry(0, "p1", 2, "queue"), Entry(1, "p1", 1, "apply")])
    writer.write_step_decisions(any_db, JOB, OP, 3, [Entry(0, "p1", 1, "queue")])  # replay: replaced, not doubled
    store = JobStore(any_db, JOB, OP)
    assert store.first_step_decision_epoch("p1") == 3
    assert store.first_step_decision_epoch("p1", "apply") == 4
    assert store.first_step_decision_epoch("p2") is None


def test_set_status(any_db: str) -> None:
    writer.set_status(any_db, JOB, OP, "stopped", T0)  # no heartbeat yet: nothing to update
    assert JobStore(any_db, JOB, OP).heartbeat() is None
    commit_epoch(any_db, 1, executors=3)
    writer.set_status(any_db, JOB, OP, "stopped", T0)
    hb = JobStore(any_db, JOB, OP).heartbeat()
    assert hb is not None and hb.status == "stopped" and hb.last_epoch == 1


def test_a_waiting_handovers_progress_reaches_the_decision_log(any_db: str) -> None:
    """The console reads a handover's timestamps, owners and open windows from the logged decision."""
    from sqlalchemy import select

    from migrations_db import models as m
    from migrations_db.db import session_scope

    progress = {"since": 4, "migration": 5_000, "activation": 10_000, "boundary": 15_000, "moves": [[3, 0, 1]],
                "watermark": 9_000, "windows_left": 2}
    writer.write_step_decisions(any_db, JOB, OP, 6, [Entry(0, "p1", 1, "queue", handover=progress),
                                                     Entry(1, "p2", 1, "queue")])
    with session_scope(any_db) as s:
        rows = sorted(s.scalars(select(m.StepDecision).where(m.StepDecision.job == JOB)), key=lambda r: r.seq)
        payloads = [r.payload for r in rows]
    assert payloads[0]["handover"] == progress and "handover" not in payloads[1]
