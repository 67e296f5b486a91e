"""Planner: turn (current map, target map) into ordered migration steps.

Each bin moves once, straight from its current owner to its target owner, so the steps always
compose to the target map. Strategies trade pause per step against total duration:
`all-at-once` (one step), `fluid` (one bin per step), `batched` (Megaphone: per step a bipartite
matching, so each worker sends at most one bin and receives at most one bin; optional byte budget
and step size) and `auto` (cheapest predicted plan within a pause budget, see costmodel).

The data-plane contract (docs/protocol.md) fixes three things encoded here: `workers` is the count
*after* a step — it grows at the first step that moves a bin into a new worker and shrinks at the
step that drains the last bin off the retired workers; and step i expects map version base + i − 1.

With move modes (`ballast.policy.movemodes`: transfer, pre-copy or handover per bin, by the cost
model), each strategy's step is split into one step per mode (a control step carries one flag);
the worker count follows the same rule over those steps, and since a handover keeps it, the
handover bins that would change it move by pre-copy (`_by_mode`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ballast.policy.costmodel import CostModel
from ballast.policy.handover import MODES, Mode
from ballast.policy.movemodes import MoveModes
from ballast.policy.plan import ORDERS, STRATEGIES, MigrationPlan, MigrationStep, Order, Strategy, apply_moves
from ballast.protocol import Move

# MigrationPlan, MigrationStep and the strategy/order names live in policy.plan (the cost model needs them
# too, and importing them from here would make the two modules import each other).
__all__ = [
    "ORDERS", "STRATEGIES", "Order", "MigrationPlan", "MigrationStep", "Strategy", "apply_moves",
    "choose_plan", "plan_migration",
]

MoveKey = Callable[[Move], tuple[float, ...]]


def _priority(order: str, load: Sequence[float], size: Sequence[int]) -> MoveKey:
    """The sort key of a move under `order` (ties broken by bin id, so plans are deterministic)."""
    if order == "hot-first":
        return lambda m: (-load[m.bin], -size[m.bin], m.bin)
    if order == "largest-first":
        return lambda m: (-size[m.bin], -load[m.bin], m.bin)
    if order == "smallest-first":
        return lambda m: (size[m.bin], load[m.bin], m.bin)
    if order == "by-id":
        return lambda m: (m.bin,)
    raise ValueError(f"unknown order {order!r}; expected one of {ORDERS}")


def _max_matching(moves: list[Move]) -> list[Move]:
    """Maximum bipartite matching senders→receivers (Kuhn), preferring earlier moves.

    Moves are in priority order; for each (src, dst) pair only its first bin is an edge, and
    senders are tried in the order of their first move, so among maximum matchings the
    high-priority bins win. Sizes are tiny (≤ bins, workers ≤ hundreds).
    """
    edges: dict[int, list[tuple[int, Move]]] = {}
    seen_pair: set[tuple[int, int]] = set()
    for m in moves:
        if (m.src, m.dst) in seen_pair:
            continue
        seen_pair.add((m.src, m.dst))
        edges.setdefault(m.src, []).append((m.dst, m))
    match_of_dst: dict[int, int] = {}  # dst -> src
    chosen: dict[int, Move] = {}  # src -> move

    def augment(src: int, visited: set[int]) -> bool:
        for dst, m in edges[src]:
            if dst in visited:
                continue
            visited.add(dst)
            if dst not in match_of_dst or augment(match_of_dst[dst], visited):
                match_of_dst[dst] = src
                chosen[src] = m
                return True
        return False

    for src in edges:  # insertion order = priority of each sender's best move
        augment(src, set())
    return list(chosen.values())


def _group(
    moves: list[Move], strategy: str, step_size: int | None, byte_budget: int | None, size: Sequence[int],
    key: MoveKey,
) -> list[list[Move]]:
    if strategy == "all-at-once":
        return [moves] if moves else []
    if strategy == "fluid":
        return [[m] for m in moves]
    if strategy != "batched":
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {STRATEGIES}")
    if step_size is not None and step_size < 1:
        raise ValueError("step_size must be >= 1")
    rest, steps = list(moves), []
    while rest:
        matched = sorted(_max_matching(rest), key=key)
        step: list[Move] = []
        used = 0
        for m in matched:
            if step_size is not None and len(step) >= step_size:
                break
            if byte_budget is not None and step and used + size[m.bin] > byte_budget:
                continue  # a bin bigger than the budget still goes, alone
            if byte_budget is not None and not step and size[m.bin] > byte_budget:
                step.append(m)
                break
            step.append(m)
            used += size[m.bin]
        steps.append(step)
        taken = {m.bin for m in step}
        rest = [m for m in rest if m.bin not in taken]
    return steps


def plan_migration(
    current: Sequence[int],
    map_version: int,
    target: Sequence[int],
    current_workers: int,
    target_workers: int,
    bin_bytes: Sequence[int] | None = None,
    bin_load: Sequence[float] | None = None,
    *,
    strategy: Strategy = "batched",
    order: Order = "hot-first",
    step_size: int | None = None,
    byte_budget: int | None = None,
    gap_s: float = 0.0,
    bin_keys: Sequence[int] | None = None,
    cost_model: CostModel | None = None,
    pause_budget_ms: float = 200.0,
    modes: MoveModes | None = None,
) -> MigrationPlan:
    """Ordered steps from `current` (at `map_version`) to `target`.

    Worker-count rule: growing, workers = target_workers from the first step with a move into a
    new worker (new workers start empty); shrinking, from the step draining the last bin of the
    retired workers. A change of W with no bin to move is one move-less step. `auto` delegates to
    `choose_plan`. `modes`: each moving bin's move mode (None: every bin by transfer).
    """
    B = len(current)
    if len(target) != B or B == 0 or B & (B - 1):
        raise ValueError("current and target maps must have the same power-of-two length")
    if current_workers < 1 or target_workers < 1:
        raise ValueError("worker counts must be >= 1")
    if any(not 0 <= w < current_workers for w in current):
        raise ValueError(f"current map names a worker outside 0..{current_workers - 1}")
    if any(not 0 <= w < target_workers for w in target):
        raise ValueError(f"target map names a worker outside 0..{target_workers - 1}")
    size = list(bin_bytes) if bin_bytes is not None else [0] * B
    load = list(bin_load) if bin_load is not None else [0.0] * B
    keys = list(bin_keys) if bin_keys is not None else [0] * B
    if strategy == "auto":
        return choose_plan(
            current, map_version, target, current_workers, target_workers, size, load,
            model=cost_model or CostModel(), pause_budget_ms=pause_budget_ms, order=order,
            gap_s=gap_s, bin_keys=keys, modes=modes,
        )
    key = _priority(order, load, size)
    moves = sorted((Move(b, c, t) for b, (c, t) in enumerate(zip(current, target)) if c != t), key=key)
    groups = _group(moves, strategy, step_size, byte_budget, size, key)
    if not groups and current_workers != target_workers:
        groups = [[]]
    by_mode, workers, modes = _by_mode(groups, current_workers, target_workers, modes)

    def step_of(i: int, mode: Mode, g: list[Move]) -> MigrationStep:
        if modes is None:  # every bin by transfer
            return MigrationStep(step=i + 1, moves=tuple(g), workers=workers[i], map_version=map_version + i,
                                 bytes=sum(size[m.bin] for m in g), keys=sum(keys[m.bin] for m in g),
                                 effective_offset_s=i * gap_s)
        return MigrationStep(
            step=i + 1, moves=tuple(g), workers=workers[i], map_version=map_version + i,
            bytes=sum(modes.bytes_moved(m.bin) for m in g),
            keys=0 if mode == "handover" else sum(keys[m.bin] for m in g), effective_offset_s=i * gap_s,
            mode=mode, cutover_bytes=None if mode == "transfer" else sum(modes.cutover_bytes(m.bin) for m in g),
            wait_s=max((modes.wait_s(m.bin) for m in g), default=0.0))

    steps = tuple(step_of(i, mode, g) for i, (mode, g) in enumerate(by_mode))
    knobs: dict[str, float] = {"gap_s": gap_s}
    if step_size is not None:
        knobs["step_size"] = step_size
    if byte_budget is not None:
        knobs["byte_budget"] = byte_budget
    return MigrationPlan(strategy, order, map_version, current_workers, target_workers, steps, gap_s, knobs,
                         modes.ordered() if modes is not None else ())


def _workers(groups: Sequence[Sequence[Move]], current_workers: int, target_workers: int) -> list[int]:
    """W after each step: the rule of the module docstring."""
    n = len(groups)
    if target_workers > current_workers:
        grow_at = next((i for i, g in enumerate(groups) if any(m.dst >= current_workers for m in g)), n - 1)
        return [current_workers if i < grow_at else target_workers for i in range(n)]
    if target_workers < current_workers:
        drain_at = max((i for i, g in enumerate(groups) if any(m.src >= target_workers for m in g)), default=0)
        return [current_workers if i < drain_at else target_workers for i in range(n)]
    return [current_workers] * n


def _by_mode(groups: list[list[Move]], current_workers: int, target_workers: int, modes: MoveModes | None,
             ) -> tuple[list[tuple[Mode, list[Move]]], list[int], MoveModes | None]:
    """Each group split into one step per mode, W after each, and the modes after moving the bins that
    would change W in a handover step to pre-copy. A group's handover step comes last when W grows
    (after the step that grows it) and first when it shrinks (before the step that drains the retired
    workers), so a handover changes W only when its group has no other step that could; then its bins
    that change W join the group's pre-copy step, which takes the change over."""
    order: tuple[Mode, ...] = MODES if target_workers >= current_workers else ("handover", "transfer", "precopy")
    while True:
        steps: list[tuple[Mode, list[Move]]] = []
        for g in groups:
            if not g:  # a move-less change of W
                steps.append(("transfer", g))
            for mode in order:
                if sub := [m for m in g if (modes.mode(m.bin) if modes is not None else "transfer") == mode]:
                    steps.append((mode, sub))
        workers = _workers([g for _, g in steps], current_workers, target_workers)
        at = next((i for i, w in enumerate(workers) if w != (workers[i - 1] if i else current_workers)), None)
        if modes is None or at is None or steps[at][0] != "handover":
            return steps, workers, modes
        g, grow = steps[at][1], target_workers > current_workers
        changing = [m.bin for m in g if (m.dst >= current_workers if grow else m.src >= target_workers)]
        why = f"its step {'grows' if grow else 'shrinks'} the worker count {current_workers} -> {target_workers}"
        modes = modes.demote(changing or [m.bin for m in g], why)


def choose_plan(
    current: Sequence[int],
    map_version: int,
    target: Sequence[int],
    current_workers: int,
    target_workers: int,
    bin_bytes: Sequence[int],
    bin_load: Sequence[float],
    *,
    model: CostModel,
    pause_budget_ms: float,
    order: Order = "hot-first",
    gap_s: float = 0.0,
    bin_keys: Sequence[int] | None = None,
    modes: MoveModes | None = None,
) -> MigrationPlan:
    """`auto`: the fastest predicted plan whose worst step pause fits the budget; else fluid.

    Candidates: all-at-once, batched, and batched with the byte budget the model says fits the
    pause budget ((budget − a) / b). Ties go to the earlier (coarser) candidate.
    """

    def mk(strategy: Strategy, byte_budget: int | None = None) -> MigrationPlan:
        return plan_migration(
            current, map_version, target, current_workers, target_workers, bin_bytes, bin_load,
            strategy=strategy, order=order, gap_s=gap_s, bin_keys=bin_keys, byte_budget=byte_budget, modes=modes,
        )

    candidates = [mk("all-at-once"), mk("batched")]
    if model.b_ms_per_byte > 0 and pause_budget_ms > model.a_ms:
        candidates.append(mk("batched", byte_budget=int((pause_budget_ms - model.a_ms) / model.b_ms_per_byte)))
    best: tuple[float, int] | None = None
    for i, p in enumerate(candidates):
        worst, total = model.predict_plan(p)
        if worst <= pause_budget_ms and (best is None or total < best[0]):
            best = (total, i)
    chosen = candidates[best[1]] if best else mk("fluid")
    return _with_knobs(chosen, pause_budget_ms)


def _with_knobs(plan: MigrationPlan, pause_budget_ms: float) -> MigrationPlan:
    return replace(plan, knobs={**plan.knobs, "auto": 1.0, "pause_budget_ms": pause_budget_ms})
