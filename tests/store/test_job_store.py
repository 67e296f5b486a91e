"""JobStore, the facade bound to (DB, job, operator): each concern module read back through it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ballast.store import JobStore, PlanRecord, StepRecord, save_plan
from migrations_db.db import get_engine
from tests.helpers.store_seed import BINS, JOB, OP, T0, applied, commit_epoch

pytestmark = pytest.mark.store


def _plan(plan_id: str, status: str, created: datetime) -> PlanRecord:
    return PlanRecord(plan_id, JOB, OP, created, "batched", status, 0, 2, 3, (0,) * BINS, 1, {}, None, "test", None)


def test_maps_heartbeat_and_executors(any_db: str) -> None:
    store = JobStore.bind(get_engine(any_db), JOB, OP)  # bound through an engine: same DB
    assert store.latest_map() is None and store.heartbeat() is None and store.executors() is None
    commit_epoch(any_db, 1, workers=2, map_version=0, executors=2)
    commit_epoch(any_db, 2, workers=3, map_version=1, executors=3)
    snap = store.latest_map()
    assert snap is not None and (snap.map_version, snap.workers, snap.bins) == (1, 3, BINS)
    v0 = store.map_at(0)
    assert v0 is not None and v0.assignment == tuple(b * 2 // BINS for b in range(BINS))
    assert store.map_at(7) is None
    assert store.executors() == 3
    hb = store.heartbeat()
    assert hb is not None and hb.updated_at.tzinfo is not None and hb.status == "running"


def test_metrics_reads(any_db: str) -> None:
    for e in range(1, 6):
        commit_epoch(any_db, e, records=e, state_bytes=100 * e)
    store = JobStore(any_db, JOB, OP)
    assert [e.epoch for e in store.epoch_window(3)] == [3, 4, 5]
    assert [e.epoch for e in store.epoch_metrics(4)] == [4, 5]
    assert [e.epoch for e in store.epoch_metrics()] == [1, 2, 3, 4, 5]
    assert {(w.epoch, w.worker) for w in store.worker_window([2, 4])} == {(2, 0), (2, 1), (4, 0), (4, 1)}
    assert [w.epoch for w in store.worker_metrics(5)] == [5, 5]
    stats = store.bin_stats(BINS, 2)  # epochs 4 and 5: load 4 + 5 per bin, size from epoch 5
    assert stats.epochs == 2 and stats.load == (9.0,) * BINS and stats.bytes == (500,) * BINS
    assert store.latest_epoch() == 5
    assert JobStore(any_db, JOB, "other").epoch_metrics() == []


def test_checkpoints_decisions_events(any_db: str) -> None:
    commit_epoch(any_db, 1, checkpoint=applied("p1", 1, 1))
    commit_epoch(any_db, 2, checkpoint=applied("p1", 2, 2))
    store = JobStore(any_db, JOB, OP)
    assert sorted(store.checkpoints("p1")) == [1, 2]
    assert [c.step for c in store.recent_checkpoints()] == [2, 1]  # newest first
    assert store.latest_decision() is None
    first = store.save_decision(current_workers=2, proposed_workers=3, target_workers=3, action="scale_up",
                                reason="lag", inputs={"u": 0.9}, at=T0)
    second = store.save_decision(current_workers=3, proposed_workers=3, target_workers=3, action="no_change",
                                 reason="ok", inputs={}, at=T0 + timedelta(minutes=1))
    latest = store.latest_decision()
    assert latest is not None and latest.id == second != first and latest.action == "no_change"
    assert store.add_event("info", "plan_emitted", "plan p1 sent")
    assert not store.add_event("info", "plan_emitted", "plan p1 sent")  # the DB dedups it
    assert [e.kind for e in store.events(kind="plan_emitted")] == ["plan_emitted"]


def test_plans(any_db: str) -> None:
    store = JobStore(any_db, JOB, OP)
    assert store.latest_plan() is None and store.open_plans() == []
    now = datetime.now(UTC)
    save_plan(any_db, _plan("old", "completed", now - timedelta(hours=1)), [])
    save_plan(any_db, _plan("new", "planned", now), [StepRecord("new", 1, {"moves": []}, now, None, None, None, None)])
    latest = store.latest_plan()
    assert latest is not None and latest.plan_id == "new"
    assert [p.plan_id for p in store.open_plans()] == ["new"]
    got = store.get_plan("old")
    assert got is not None and got.status == "completed"


def test_prune_keeps_recent_epochs(any_db: str) -> None:
    for e in range(1, 11):
        commit_epoch(any_db, e)
    store = JobStore(any_db, JOB, OP)
    pruned = store.prune(keep=timedelta(seconds=1), keep_epochs=3)
    assert pruned.epoch_rows == 7 and [e.epoch for e in store.epoch_metrics()] == [8, 9, 10]
