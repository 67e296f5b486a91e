"""ballast.store.step_checkpoints: a plan's checkpoints read back by step; the cost model's samples are
the operator's applied checkpoints that moved bins, newest first; a checkpoint's dict is JSON-ready."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from ballast.store import writer
from ballast.store.step_checkpoints import checkpoints, recent_checkpoints
from migrations_db import models as m
from tests.helpers.store_seed import JOB, OP, T0, applied

pytestmark = pytest.mark.store


def _write(url: str, *rows: m.StepCheckpoint) -> None:
    with writer.epoch_transaction(url) as s:
        for r in rows:
            writer.insert_checkpoint_once(s, r)


def _rejected(plan_id: str, step: int, operator: str = OP) -> m.StepCheckpoint:
    return m.StepCheckpoint(job=JOB, operator=operator, plan_id=plan_id, step=step, status="rejected",
                            applied_epoch=None, applied_at=None, completed_at=T0, bins_moved=0, keys_moved=0,
                            bytes_moved=0, migration_ms=0.0, map_version_after=None, reason="stale map")


def test_a_plans_checkpoints_by_step(any_db: str) -> None:
    assert checkpoints(any_db, "p1") == {}
    _write(any_db, applied("p1", 1, 3), _rejected("p1", 2), applied("p2", 1, 4))
    cps = checkpoints(any_db, "p1")
    assert sorted(cps) == [1, 2]
    assert (cps[1].status, cps[1].applied_epoch, cps[1].bins_moved, cps[1].map_version_after) == ("applied", 3, 2, 1)
    assert cps[1].completed_at == T0 + timedelta(seconds=3) and cps[1].applied_at == T0
    rej = cps[2]
    assert (rej.status, rej.reason, rej.applied_at, rej.applied_epoch) == ("rejected", "stale map", None, None)


def test_the_cost_models_samples_are_applied_moves_newest_first(any_db: str) -> None:
    _write(any_db, applied("p1", 1, 3), applied("p1", 2, 9), applied("p2", 1, 6), _rejected("p2", 2))
    noop = applied("p3", 1, 12)
    noop.bins_moved = 0  # a step that moved no bin says nothing about migration cost
    other = applied("p4", 1, 15)
    other.operator = "wordcount"
    _write(any_db, noop, other)
    assert [(c.plan_id, c.step) for c in recent_checkpoints(any_db, JOB, OP)] == [("p1", 2), ("p2", 1), ("p1", 1)]
    assert [(c.plan_id, c.step) for c in recent_checkpoints(any_db, JOB, OP, limit=1)] == [("p1", 2)]
    assert [c.plan_id for c in recent_checkpoints(any_db, JOB, "wordcount")] == ["p4"]


def test_a_checkpoint_as_a_dict_is_json_with_iso_times(any_db: str) -> None:
    _write(any_db, applied("p1", 1, 3), _rejected("p1", 2))
    cps = checkpoints(any_db, "p1")
    d = json.loads(json.dumps(cps[1].to_dict()))
    assert d["applied_at"] == T0.isoformat() and d["completed_at"] == (T0 + timedelta(seconds=3)).isoformat()
    assert d["plan_id"] == "p1" and d["bytes_moved"] == 4 and d["migration_ms"] == 5.0
    assert cps[2].to_dict()["applied_at"] is None
