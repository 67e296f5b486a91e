"""Driver fencing tokens: each start takes a newer one; a stale driver's epoch commit, decision
log, status and durable-state guard are refused in their own transaction, with both tokens named,
and leave nothing behind; a commit under way when a newer driver starts is serialized before it."""

from __future__ import annotations

import threading
import time

import pytest

from ballast.store import JobStore, fencing, writer
from tests.helpers.store_seed import JOB, OP, T0, Entry, applied, commit_epoch

pytestmark = pytest.mark.store


def test_each_start_takes_the_next_token_per_operator(any_db: str) -> None:
    assert fencing.token_row(any_db, JOB, OP) is None
    first = fencing.take_token(any_db, JOB, OP, T0, outage_s=600.0)
    second = fencing.take_token(any_db, JOB, OP, T0)
    other = fencing.take_token(any_db, JOB, "wordcount", T0)  # another operator: its own counter
    assert (first.token, second.token, other.token) == (1, 2, 1)
    row = fencing.token_row(any_db, JOB, OP)
    assert row is not None and row.token == 2 and row.outage_s == 0.0 and row.checked_at is None


def test_current_token_commits_and_is_marked_checked(any_db: str) -> None:
    fence = fencing.take_token(any_db, JOB, OP, T0)
    commit_epoch(any_db, 1, checkpoint=applied("p1", 1, 1), fence=fence)
    fencing.guard(any_db, fence, T0, "the manifest of epoch 2")
    store = JobStore(any_db, JOB, OP)
    assert [e.epoch for e in store.epoch_metrics()] == [1] and list(store.checkpoints("p1")) == [1]
    row = fencing.token_row(any_db, JOB, OP)
    assert row is not None and row.checked_at is not None


def test_stale_driver_commits_nothing_and_the_error_names_both_tokens(any_db: str) -> None:
    old = fencing.take_token(any_db, JOB, OP, T0)
    commit_epoch(any_db, 1, fence=old)
    new = fencing.take_token(any_db, JOB, OP, T0)  # the relaunch
    with pytest.raises(fencing.Fenced, match="holds driver token 1, but the metrics DB has token 2") as exc:
        commit_epoch(any_db, 2, checkpoint=applied("p1", 1, 2), event="late", fence=old)
    assert (exc.value.mine, exc.value.current) == (1, 2) and "commit" in str(exc.value)
    with pytest.raises(fencing.Fenced, match="the decision log of epoch 2 was refused"):
        writer.write_step_decisions(any_db, JOB, OP, 2, [Entry(0, "p1", 1, "apply")], old)
    with pytest.raises(fencing.Fenced, match="retention after epoch 2 was refused"):
        fencing.guard(any_db, old, T0, "retention after epoch 2")
    with pytest.raises(fencing.Fenced):
        writer.set_status(any_db, JOB, OP, "stopped", T0, old)
    store = JobStore(any_db, JOB, OP)
    assert [e.epoch for e in store.epoch_metrics()] == [1]  # nothing of epoch 2: metrics, checkpoint, event
    assert store.checkpoints("p1") == {} and store.events() == []
    assert store.first_step_decision_epoch("p1") is None
    hb = store.heartbeat()
    assert hb is not None and hb.status == "running" and hb.last_epoch == 1  # not marked stopped by the stale one
    commit_epoch(any_db, 2, checkpoint=applied("p1", 1, 2), fence=new)  # the newer driver replays it
    assert [e.epoch for e in store.epoch_metrics()] == [1, 2] and list(store.checkpoints("p1")) == [1]


def test_no_token_row_is_refused_too(any_db: str) -> None:
    with pytest.raises(fencing.Fenced, match="no token"):
        fencing.guard(any_db, fencing.Fence(JOB, OP, 1), T0, "the manifest of epoch 1")


def test_a_commit_under_way_finishes_before_a_newer_start_takes_over(any_db: str) -> None:
    """Compare-and-write, not check-then-write: the token row stays locked by the check until the
    epoch's transaction ends, so the relaunch's bump waits; after it, the old token is refused."""
    old = fencing.take_token(any_db, JOB, OP, T0)
    taken: list[fencing.Fence] = []
    with writer.epoch_transaction(any_db, old) as s:
        writer.ensure_routing_map(s, JOB, OP, 0, 1, 1, [0] * 8, T0, None, None)
        relaunch = threading.Thread(target=lambda: taken.append(fencing.take_token(any_db, JOB, OP, T0)))
        relaunch.start()
        time.sleep(1.0)
        assert relaunch.is_alive() and not taken, "a newer start took the token during a commit under way"
    relaunch.join(timeout=30)
    assert [f.token for f in taken] == [2]
    assert JobStore(any_db, JOB, OP).latest_map() is not None  # the old driver's commit landed, before the bump
    with pytest.raises(fencing.Fenced):
        commit_epoch(any_db, 2, fence=old)
