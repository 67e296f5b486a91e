"""ballast.policy.plan: a migration plan's shape. A step's kind follows from what it carries (split,
moves or a worker change alone), a plan's totals are its steps', a split is one step that keeps
every worker, and moves compose only from the bin's owner, as the job applies them."""

from __future__ import annotations

from typing import get_args

import pytest

from ballast.code_version import CodeVersion
from ballast.policy.plan import (
    ORDERS,
    STRATEGIES,
    MigrationPlan,
    MigrationStep,
    Order,
    Strategy,
    apply_moves,
    split_plan,
    upgrade_plan,
)
from ballast.protocol import Move

pytestmark = pytest.mark.controlplane


def test_a_steps_kind_and_size_follow_from_what_it_carries() -> None:
    moves = MigrationStep(1, (Move(0, 0, 1), Move(3, 1, 0)), workers=2, map_version=4, bytes=10)
    assert (moves.kind, moves.bins) == ("moves", 2)
    assert MigrationStep(1, (), workers=3, map_version=4).kind == "noop"
    assert MigrationStep(1, (), workers=2, map_version=4, split_to=32).kind == "split"


def test_a_plans_totals_are_its_steps() -> None:
    steps = (MigrationStep(1, (Move(0, 0, 1),), 2, 0, bytes=100), MigrationStep(2, (Move(1, 0, 1), Move(2, 0, 1)),
                                                                                 2, 1, bytes=250))
    p = MigrationPlan("fluid", "by-id", 0, 1, 2, steps)
    assert (p.bins, p.bytes) == (3, 350)
    empty = MigrationPlan("fluid", "by-id", 0, 1, 1, ())
    assert (empty.bins, empty.bytes) == (0, 0)


def test_a_split_is_one_step_that_keeps_the_workers_and_expects_the_base_version() -> None:
    p = split_plan(7, [0, 1, 1, 0], 2, 16)
    assert (p.strategy, p.base_version, p.from_workers, p.to_workers, p.bins) == ("split", 7, 2, 2, 0)
    [s] = p.steps
    assert (s.step, s.kind, s.split_to, s.map_version, s.workers, s.moves) == (1, "split", 16, 7, 2, ())


def test_a_merge_first_moves_the_parts_apart_to_where_most_of_their_bytes_are() -> None:
    from ballast.bin_maps import merge_assignment, unmerged_siblings
    from ballast.policy import merge_plan

    a = [0, 1, 1, 1, 0, 0, 1, 0]  # to 2 bins: parts 0-3 mostly on worker 1, parts 4-7 mostly on 0
    p = merge_plan(3, a, 2, 2)
    moves, merge = p.steps
    assert [(m.bin, m.src, m.dst) for m in moves.moves] == [(0, 0, 1), (6, 1, 0)]
    assert (moves.kind, moves.map_version, merge.kind, merge.merge_to, merge.map_version) == ("moves", 3, "merge", 2, 4)
    assert merge.bins_after == 2 and moves.bins_after is None and p.strategy == "merge"
    after = apply_moves(a, list(moves.moves))
    assert not unmerged_siblings(after, 2) and merge_assignment(after, 2) == [1, 0]
    by_bytes = merge_plan(3, a, 2, 2, size=[900, 1, 1, 1, 5, 5, 900, 5])  # most bytes: 0 on w0, 6 on w1
    assert [(m.bin, m.dst) for m in by_bytes.steps[0].moves] == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (7, 1)]
    assert by_bytes.steps[0].bytes == 1 + 1 + 1 + 5 + 5 + 5
    together = merge_plan(0, [0, 0, 1, 1], 2, 2)
    assert [s.kind for s in together.steps] == ["merge"] and together.steps[0].map_version == 0
    for bins, workers, why in ((4, 2, "smaller power of two"), (3, 2, "smaller power of two"),
                               (1, 2, "fewer bins than the 2 workers")):
        with pytest.raises(ValueError, match=why):
            merge_plan(0, [0, 0, 1, 1], workers, bins)


def test_an_upgrade_is_one_step_that_moves_nothing_and_keeps_the_workers() -> None:
    code = CodeVersion("pkg.mod:Counter", "2", ("/tmp/v2.zip",))
    p = upgrade_plan(5, 3, code)
    assert (p.strategy, p.base_version, p.from_workers, p.to_workers, p.bins, p.bytes) == ("upgrade", 5, 3, 3, 0, 0)
    [s] = p.steps
    assert (s.step, s.kind, s.moves, s.workers, s.map_version, s.code) == (1, "upgrade", (), 3, 5, code)
    assert s.bins_after is None and s.settings is None and s.split_to is None


@pytest.mark.parametrize("bins", [4, 2, 12, 0])
def test_a_split_must_raise_the_bin_count_to_a_power_of_two(bins: int) -> None:
    with pytest.raises(ValueError, match=f"a split raises the bin count to a larger power of two, not 4 -> {bins}"):
        split_plan(0, [0, 1, 1, 0], 2, bins)


def test_moves_apply_in_order_from_the_bins_owner_and_leave_the_input_alone() -> None:
    before = [0, 0, 1, 1]
    after = apply_moves(before, [Move(0, 0, 2), Move(3, 1, 0), Move(0, 2, 1)])  # bin 0 moves twice
    assert after == [1, 0, 1, 0] and before == [0, 0, 1, 1]
    assert apply_moves((0, 1), []) == [0, 1]
    with pytest.raises(ValueError, match="bin 2 is on worker 1, not 0"):
        apply_moves(before, [Move(0, 0, 1), Move(2, 0, 1)])


def test_the_names_are_the_literals() -> None:
    assert get_args(Strategy) == STRATEGIES and get_args(Order) == ORDERS
