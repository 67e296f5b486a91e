"""ballast.store.maps: the map in force is the highest version the job recorded, any version can be
read back, the current bin count's first epoch is known (bin metrics before a split number bins
otherwise), and the heartbeat is read back with UTC times."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ballast.store import writer
from ballast.store.maps import bins_in_force_since, heartbeat, latest_map, map_at
from tests.helpers.store_seed import JOB, OP, T0, commit_epoch

pytestmark = pytest.mark.store


def _map(url: str, version: int, epoch: int, assignment: list[int], plan_id: str | None = None,
         step: int | None = None, operator: str = OP) -> None:
    with writer.epoch_transaction(url) as s:
        writer.ensure_routing_map(s, JOB, operator, version, epoch, max(assignment) + 1, assignment, T0, plan_id, step)


def test_no_map_before_the_job_ran(any_db: str) -> None:
    assert latest_map(any_db, JOB, OP) is None and map_at(any_db, JOB, OP, 0) is None
    assert bins_in_force_since(any_db, JOB, OP) == 0 and heartbeat(any_db, JOB, OP) is None


def test_the_latest_version_is_in_force_and_each_version_reads_back(any_db: str) -> None:
    _map(any_db, 0, 0, [0, 0, 0, 0])
    _map(any_db, 2, 9, [0, 1, 1, 2], "p-1", 2)
    _map(any_db, 1, 5, [0, 1, 0, 1], "p-1", 1)  # recorded late: still not the latest version
    _map(any_db, 7, 20, [0, 0, 0, 0], operator="other")  # another operator's map
    cur = latest_map(any_db, JOB, OP)
    assert cur is not None and (cur.map_version, cur.epoch, cur.workers, cur.plan_id, cur.step) == (2, 9, 3, "p-1", 2)
    assert cur.assignment == (0, 1, 1, 2) and cur.bins == 4 and (cur.job, cur.operator) == (JOB, OP)
    v1 = map_at(any_db, JOB, OP, 1)
    assert v1 is not None and v1.assignment == (0, 1, 0, 1) and v1.workers == 2
    assert map_at(any_db, JOB, OP, 3) is None and map_at(any_db, JOB, OP, 7) is None


def test_the_bin_count_is_in_force_from_the_epoch_of_the_split(any_db: str) -> None:
    _map(any_db, 0, 0, [0] * 8)
    _map(any_db, 1, 5, [0, 1] * 4)
    assert bins_in_force_since(any_db, JOB, OP) == 0  # one count since the start
    _map(any_db, 2, 9, [0, 1] * 16)  # a split to 32 bins at epoch 9
    assert bins_in_force_since(any_db, JOB, OP) == 9
    _map(any_db, 3, 12, [1, 0] * 16)  # a move at 32 bins: the count has not changed
    assert bins_in_force_since(any_db, JOB, OP) == 9


def test_the_heartbeat_reads_back_in_utc(any_db: str) -> None:
    commit_epoch(any_db, 3, workers=2, map_version=0, executors=2)
    hb = heartbeat(any_db, JOB, OP)
    assert hb is not None and (hb.last_epoch, hb.map_version, hb.workers, hb.status) == (3, 0, 2, "running")
    assert hb.executors == 2 and hb.capacity is None and hb.pid > 0 and hb.host
    assert hb.updated_at == T0 + timedelta(seconds=3) and hb.started_at == T0
    assert hb.updated_at.utcoffset() == timedelta(0) and heartbeat(any_db, JOB, "other") is None
