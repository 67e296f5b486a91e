"""ballast.policy.plan: a migration plan's shape. A step's kind follows from what it carries (split,
moves or a worker change alone), a plan's totals are its steps', a split is one step that keeps
every worker, and moves compose only from the bin's owner, as the job applies them."""

from __future__ import annotations

from typing import get_args

import pytest

from ballast.policy.plan import (
    ORDERS,
    STRATEGIES,
    MigrationPlan,
    MigrationStep,
    Order,
    Strategy,
    apply_moves,
    split_plan,
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
