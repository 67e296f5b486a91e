"""Planner strategies against the data-plane contract: composition, worker counts, map versions;
with move modes, one mode per step and no handover step that changes the worker count."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from ballast.policy.handover import MODES, BinCosts, WindowSpec, choose_mode
from ballast.policy.movemodes import DeclaredWindow, ModeBudgets, MoveModes, choose_bin_modes
from ballast.policy.placement import place, uniform_map
from ballast.policy.planner import MigrationPlan, apply_moves, plan_migration
from ballast.protocol import Move

pytestmark = pytest.mark.controlplane

B = 256


def scenario(w_old: int, w_new: int, seed: int = 1):
    rng = random.Random(seed)
    load = [1.0 / (k + 1) ** 1.1 for k in range(B)]
    rng.shuffle(load)
    size = [rng.randint(1_000, 1_000_000) for _ in range(B)]
    cur = uniform_map(B, w_old)
    tgt = place(cur, w_new, load, size)
    return cur, tgt, size, load


def compose(cur: list[int], plan: MigrationPlan) -> list[int]:
    m = list(cur)
    for s in plan.steps:
        m = apply_moves(m, s.moves)
    return m


def check_contract(cur: list[int], tgt: list[int], plan: MigrationPlan, version: int, w_old: int, w_new: int) -> None:
    """Every rule the data plane enforces, replayed on the plan."""
    m = list(cur)
    for i, s in enumerate(plan.steps, start=1):
        assert s.step == i and s.map_version == version + i - 1
        assert len({mv.bin for mv in s.moves}) == len(s.moves)
        assert all(mv.src != mv.dst for mv in s.moves)
        m = apply_moves(m, s.moves)
        assert max(m) < s.workers, f"step {i}: a bin sits on a worker >= workers={s.workers}"
    assert m == tgt and plan.steps[-1].workers == w_new


@pytest.mark.parametrize("strategy", ["all-at-once", "fluid", "batched"])
@pytest.mark.parametrize("w_old,w_new", [(2, 3), (4, 5), (3, 2), (4, 4), (5, 2)])
def test_every_strategy_composes_exactly_and_honours_the_contract(strategy: str, w_old: int, w_new: int) -> None:
    cur, tgt, size, load = scenario(w_old, w_new)
    plan = plan_migration(cur, 7, tgt, w_old, w_new, size, load, strategy=strategy)  # type: ignore[arg-type]
    assert compose(cur, plan) == tgt
    n_moves = sum(c != t for c, t in zip(cur, tgt))
    assert plan.bins == n_moves and plan.bytes == sum(size[b] for b in range(B) if cur[b] != tgt[b])
    if n_moves:
        check_contract(cur, tgt, plan, 7, w_old, w_new)
    if strategy == "all-at-once":
        assert len(plan.steps) == (1 if n_moves else 0)
    if strategy == "fluid":
        assert all(s.bins == 1 for s in plan.steps) and len(plan.steps) == n_moves


def test_growth_switches_workers_at_the_first_move_into_a_new_worker() -> None:
    cur = [0, 0, 1, 1]
    tgt = [0, 2, 1, 1]  # 2 -> 3 workers; bin 1 to the new worker
    # fluid, by-id, with an extra move among old workers first
    tgt2 = [1, 2, 0, 1]
    plan = plan_migration(cur, 0, tgt2, 2, 3, strategy="fluid", order="by-id")
    assert [(s.moves[0].bin, s.workers) for s in plan.steps] == [(0, 2), (1, 3), (2, 3)]
    one = plan_migration(cur, 3, tgt, 2, 3, strategy="all-at-once")
    assert [(s.workers, s.map_version) for s in one.steps] == [(3, 3)]


def test_shrink_drops_workers_only_at_the_step_draining_the_retired_worker() -> None:
    cur = [0, 1, 2, 2]
    tgt = [1, 0, 0, 1]  # 3 -> 2: bins 2, 3 leave worker 2
    plan = plan_migration(cur, 10, tgt, 3, 2, strategy="fluid", order="by-id")
    assert [s.moves[0].bin for s in plan.steps] == [0, 1, 2, 3]
    assert [s.workers for s in plan.steps] == [3, 3, 3, 2]
    assert [s.map_version for s in plan.steps] == [10, 11, 12, 13]


def test_worker_count_change_without_moves_is_one_noop_step_and_no_change_is_empty() -> None:
    plan = plan_migration([0, 0, 1, 1], 5, [0, 0, 1, 1], 2, 3)
    assert [(s.kind, s.workers, s.map_version) for s in plan.steps] == [("noop", 3, 5)]
    assert plan_migration([0, 0, 1, 1], 5, [0, 0, 1, 1], 2, 2).steps == ()


def test_batched_each_worker_sends_and_receives_at_most_one_bin_per_step() -> None:
    cur, tgt, size, load = scenario(2, 6)
    plan = plan_migration(cur, 0, tgt, 2, 6, size, load, strategy="batched")
    for s in plan.steps:
        assert max(Counter(m.src for m in s.moves).values()) <= 1
        assert max(Counter(m.dst for m in s.moves).values()) <= 1
    assert max(s.bins for s in plan.steps) >= 2  # it does parallelise
    # no schedule can beat the busiest worker's degree (König); here repeated matching reaches it
    moves = [(c, t) for c, t in zip(cur, tgt) if c != t]
    busiest = max(max(Counter(c for c, _ in moves).values()), max(Counter(t for _, t in moves).values()))
    assert len(plan.steps) == busiest < plan.bins


def test_batched_matching_is_maximum_not_just_greedy() -> None:
    # moves by priority: 0: 0->2, 1: 0->3, 2: 1->2. Greedy takes {0->2} and then blocks 1->2;
    # a maximum matching pairs 0->3 with 1->2.
    cur, tgt = [0, 0, 1, 1], [2, 3, 2, 1]
    plan = plan_migration(cur, 0, tgt, 4, 4, strategy="batched", order="by-id")
    assert len(plan.steps) == 2 and plan.steps[0].bins == 2


def test_batched_byte_budget_and_step_size() -> None:
    cur, tgt, size, load = scenario(2, 8, seed=4)
    budget = 1_200_000
    plan = plan_migration(cur, 0, tgt, 2, 8, size, load, strategy="batched", byte_budget=budget)
    for s in plan.steps:
        assert s.bytes <= budget or s.bins == 1
    assert compose(cur, plan) == tgt
    # a bin bigger than the budget goes alone
    big = plan_migration([0, 0, 1, 1], 0, [1, 0, 0, 1], 2, 2, [5_000, 10, 10, 10], strategy="batched", byte_budget=100)
    assert [[m.bin for m in s.moves] for s in big.steps] == [[0], [2]]
    sized = plan_migration(cur, 0, tgt, 2, 8, size, load, strategy="batched", step_size=1)
    assert all(s.bins == 1 for s in sized.steps) and compose(cur, sized) == tgt


def test_orders_and_gap_spacing() -> None:
    cur = [0] * 4
    tgt = [1] * 4
    size = [30, 10, 40, 20]
    load = [1.0, 4.0, 2.0, 3.0]
    first = lambda order: [s.moves[0].bin for s in plan_migration(  # noqa: E731
        cur, 0, tgt, 2, 2, size, load, strategy="fluid", order=order).steps]
    assert first("hot-first") == [1, 3, 2, 0]
    assert first("largest-first") == [2, 0, 3, 1]
    assert first("smallest-first") == [1, 3, 0, 2]
    assert first("by-id") == [0, 1, 2, 3]
    plan = plan_migration(cur, 0, tgt, 2, 2, size, load, strategy="fluid", gap_s=2.5)
    assert [s.effective_offset_s for s in plan.steps] == [0.0, 2.5, 5.0, 7.5]
    with pytest.raises(ValueError):
        plan_migration(cur, 0, tgt, 2, 2, strategy="fluid", order="random")  # type: ignore[arg-type]


def test_invalid_maps_are_refused() -> None:
    with pytest.raises(ValueError):
        plan_migration([0, 0, 1], 0, [0, 0, 1], 2, 2)  # not a power of two
    with pytest.raises(ValueError):
        plan_migration([0, 0, 1, 1], 0, [0, 0, 1, 2], 2, 2)  # target names worker 2 of 2
    with pytest.raises(ValueError):
        apply_moves([0, 1], [Move(0, 1, 0)])  # wrong source


BUDGETS = ModeBudgets(a_ms=50.0, b_ms_per_byte=1e-5, pause_budget_ms=200.0, step_budget_s=60.0, epoch_s=0.5)


def mixed_modes(cur: list[int], tgt: list[int], seed: int) -> MoveModes:
    """Every moving bin by a random mode (as the cost model could choose them), for the contract checks."""
    rng = random.Random(seed)
    moving = [b for b in range(len(cur)) if cur[b] != tgt[b]]
    costs = {b: BinCosts(b, rng.randint(1_000, 10**8), 5_000.0, windowed=True, handover_wait_s=7.0) for b in moving}
    choices = {b: choose_mode(costs[b], 1e-5, 50.0, 200.0, 60.0, forced=rng.choice(MODES)) for b in moving}
    return MoveModes("auto", costs, choices, BUDGETS)


def documented_workers(plan: MigrationPlan, w_old: int, w_new: int) -> list[int]:
    """W after each step by the rule of docs/policy.md (grow at the first move into a new worker,
    shrink at the step draining the last bin off the retired ones), over the plan's own steps."""
    n = len(plan.steps)
    if w_new > w_old:
        at = next((i for i, s in enumerate(plan.steps) if any(m.dst >= w_old for m in s.moves)), n - 1)
    elif w_new < w_old:
        at = max((i for i, s in enumerate(plan.steps) if any(m.src >= w_new for m in s.moves)), default=0)
    else:
        return [w_old] * n
    return [w_old] * at + [w_new] * (n - at)


@pytest.mark.parametrize("strategy", ["all-at-once", "fluid", "batched"])
@pytest.mark.parametrize("w_old,w_new", [(2, 3), (4, 5), (3, 2), (4, 4), (5, 2)])
def test_bins_of_different_modes_go_into_separate_steps_that_keep_the_contract(strategy: str, w_old: int,
                                                                              w_new: int) -> None:
    cur, tgt, size, load = scenario(w_old, w_new)
    for seed in range(3):
        modes = mixed_modes(cur, tgt, seed)
        plan = plan_migration(cur, 7, tgt, w_old, w_new, size, load, strategy=strategy,  # type: ignore[arg-type]
                              modes=modes)
        assert compose(cur, plan) == tgt and plan.bins == len(modes.choices)
        check_contract(cur, tgt, plan, 7, w_old, w_new)
        assert [s.workers for s in plan.steps] == documented_workers(plan, w_old, w_new)
        final = {c.bin: c for c in plan.modes}
        assert set(final) == set(modes.choices)
        before = w_old
        for s in plan.steps:
            assert {final[m.bin].mode for m in s.moves} == {s.mode}, "one mode, one flag per step"
            if s.mode == "handover":  # the data plane refuses a handover that changes W
                assert s.workers == before and s.bytes == 0 and s.wait_s == 7.0
            before = s.workers
            if strategy == "batched":
                assert max(Counter(m.src for m in s.moves).values()) <= 1
                assert max(Counter(m.dst for m in s.moves).values()) <= 1
        for b, c in final.items():  # a bin moves as chosen unless a handover would have changed W
            assert c == modes.choices[b] or (modes.mode(b) == "handover" and c.mode == "precopy"
                                             and "worker count" in c.reason)
        if strategy == "all-at-once":
            assert len(plan.steps) <= 3
        if w_old == w_new:
            assert plan.modes == modes.ordered(), "nothing to demote when W stays"


def test_a_handover_keeps_the_worker_count_so_the_bins_that_change_it_move_by_precopy() -> None:
    window = DeclaredWindow(WindowSpec(10_000), lateness_ms=20_000)

    def forced(cur: list[int], tgt: list[int]) -> MoveModes:
        moving = [b for b in range(len(cur)) if cur[b] != tgt[b]]
        return choose_bin_modes(moving, [10**6] * len(cur), [10] * len(cur), [1.0] * len(cur), window, BUDGETS,
                                requested="handover")

    cur, grow = [0, 0, 1, 1], [2, 0, 1, 2]  # 2 -> 3: bins 0 and 3 into the new worker
    fluid = plan_migration(cur, 0, grow, 2, 3, strategy="fluid", order="by-id", modes=forced(cur, grow))
    assert [(s.moves[0].bin, s.mode, s.workers) for s in fluid.steps] == [(0, "precopy", 3), (3, "handover", 3)]
    [why] = [c.reason for c in fluid.modes if c.bin == 0]
    assert why.startswith("pre-copy: its step grows the worker count 2 -> 3, which a handover cannot")
    mixed = [1, 0, 1, 2]  # bin 0 among the old workers, bin 3 into the new one, in one step
    one = plan_migration(cur, 0, mixed, 2, 3, strategy="all-at-once", modes=forced(cur, mixed))
    assert [([m.bin for m in s.moves], s.mode, s.workers) for s in one.steps] == [([3], "precopy", 3),
                                                                                  ([0], "handover", 3)]
    cur3, shrink = [0, 1, 2, 2], [1, 0, 0, 1]  # 3 -> 2: the step draining worker 2 shrinks W
    down = plan_migration(cur3, 0, shrink, 3, 2, strategy="fluid", order="by-id", modes=forced(cur3, shrink))
    assert [(s.mode, s.workers) for s in down.steps] == [("handover", 3), ("handover", 3), ("handover", 3),
                                                         ("precopy", 2)]
    assert "shrinks the worker count 3 -> 2" in [c.reason for c in down.modes if c.bin == 3][0]
