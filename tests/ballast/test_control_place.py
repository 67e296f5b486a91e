"""ballast.control.place: the target map for a worker count balances the measured per-bin load while
moving few bins, uses every target worker and no other, and reports what reaching it moves."""

from __future__ import annotations

import pytest

from ballast.control import collect, place
from ballast.control.handoffs import BinLoad, Snapshot

pytestmark = pytest.mark.controlplane


def test_place_balances_load_and_moves_only_what_it_must(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    p = place.place(snap.map.assignment, snap.bins, 2)
    assert sorted(set(p.assignment)) == [0, 1] and p.bins_moved == sum(1 for w in p.assignment if w == 1)
    assert p.max_over_mean < 1.2
    same = place.place(snap.map.assignment, snap.bins, 1)
    assert same.bins_moved == 0 and same.assignment == snap.map.assignment



def _bins(load: list[float], size: int = 100) -> BinLoad:
    return BinLoad(tuple(load), tuple([size] * len(load)), tuple([1] * len(load)), 5)


def test_growing_uses_every_new_worker_and_counts_what_moves() -> None:
    current = (0, 0, 0, 0, 1, 1, 1, 1)
    p = place.place(current, _bins([10.0] * 8), 4)
    assert sorted(set(p.assignment)) == [0, 1, 2, 3] and len(p.assignment) == 8
    moved = [b for b, (a, t) in enumerate(zip(current, p.assignment)) if a != t]
    assert p.bins_moved == len(moved) == 4 and p.bytes_moved == 400  # two bins to each new worker, none between old
    assert p.target_workers == 4 and p.max_over_mean == pytest.approx(1.0)


def test_shrinking_empties_the_retired_workers_and_keeps_the_rest() -> None:
    current = (0, 1, 2, 3, 0, 1, 2, 3)
    p = place.place(current, _bins([5.0, 5.0, 1.0, 1.0, 5.0, 5.0, 1.0, 1.0]), 2)
    assert set(p.assignment) <= {0, 1}
    assert all(t == a for a, t in zip(current, p.assignment) if a < 2)  # bins of kept workers stay put
    assert p.bins_moved == 4 and p.max_over_mean == pytest.approx(1.0)


def test_a_hot_bin_bounds_the_balance_it_reports() -> None:
    p = place.place((0, 0, 1, 1), _bins([30.0, 1.0, 1.0, 1.0]), 2)
    assert p.assignment.count(p.assignment[0]) == 1  # the hot bin has its worker to itself
    assert p.max_over_mean == pytest.approx(30.0 / 16.5)  # the hot bin alone: no placement does better
