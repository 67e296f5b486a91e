"""spark_jobs.worker_bins: the bins a worker owns follow the map, one cached set per map and worker.
(Bringing bins to the state after the epoch before — current, caught up, loaded, warmed — is
driven through whole worker epochs in test_worker.py.) Fast: no services."""

from __future__ import annotations

import pytest

from spark_jobs.worker_bins import owned_bins

pytestmark = pytest.mark.dataplane


def test_owned_bins_follow_the_map():
    assignment = (0, 1, 1, 0, 2, 2, 2, 0)
    assert owned_bins(assignment, 0) == {0, 3, 7} and owned_bins(assignment, 2) == {4, 5, 6}
    assert owned_bins(assignment, 3) == frozenset()
    assert owned_bins(assignment, 0) is owned_bins(tuple(assignment), 0), "one set per map and worker"
