"""ballast.bin_maps: a split or a merge renumbers the bin map without moving a key (every part stays
on its bin's worker), and a merge names the bins whose parts sit apart. Fast: pure Python."""

from __future__ import annotations

import pytest

from ballast.bin_maps import merge_assignment, split_assignment, unmerged_siblings

pytestmark = pytest.mark.controlplane


def test_a_split_keeps_every_part_on_its_bins_worker() -> None:
    assert split_assignment([0, 1], 8) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert split_assignment((2, 0, 1, 1), 8) == [2, 2, 0, 0, 1, 1, 1, 1]
    assert split_assignment([0, 1, 0, 1], 4) == [0, 1, 0, 1]


def test_a_merge_joins_parts_that_share_a_worker() -> None:
    assert merge_assignment([0, 0, 0, 0, 1, 1, 1, 1], 2) == [0, 1]
    assert merge_assignment((2, 2, 0, 0, 1, 1, 1, 1), 4) == [2, 0, 1, 1]
    assert merge_assignment([3, 3], 1) == [3]
    assert merge_assignment(split_assignment([2, 0, 1, 1], 16), 4) == [2, 0, 1, 1], "the inverse of a split"
    assert unmerged_siblings([0, 0, 1, 1], 2) == []
    assert unmerged_siblings([0, 1, 1, 1, 2, 2, 0, 2], 2) == [(0, [0, 1, 1, 1]), (1, [2, 2, 0, 2])]
    assert unmerged_siblings([0, 1, 1, 1, 2, 2, 0, 2], 4) == [(0, [0, 1]), (3, [0, 2])]
