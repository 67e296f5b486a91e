"""Planner: turn (current map, target map) into ordered migration steps.

Each bin moves once, straight from its current owner to its target owner, so the steps always
compose to the target map. Strategies trade pause per step against total duration:
`all-at-once` (one step), `fluid` (one bin per step), `batched` (Megaphone: per step a bipartite
matching, so each worker sends at most one bin and receives at most one bin; optional byte budget
and step size) and `auto` (cheapest predicted plan within a pause budget, see costmodel).

The data-plane contract (docs/protocol.md) fixes three things encoded here: `workers` is the count
*after* a step — it grows at the first step that moves a bin into a new worker and shrinks at the
step that drains the last bin off the retired workers; and step i expects map version base + i − 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Sequence

from ballast.protocol import Move

if TYPE_CHECKING:
    from ballast.policy.costmodel import CostModel

Strategy = Literal["all-at-once", "fluid", "batched", "auto"]
Order = Literal["hot-first", "largest-first", "smallest-first", "by-id"]
STRATEGIES = ("all-at-once", "fluid", "batched", "auto")
ORDERS = ("hot-first", "largest-first", "smallest-first", "by-id")


@dataclass(frozen=True)
class PlanStep:
    """One control step: moves, worker count after it, map version expected before it."""

    step: int  # 1-based
    moves: tuple[Move, ...]
    workers: int
    map_version: int
    bytes: int = 0
    keys: int = 0
    effective_offset_s: float = 0.0  # "not before" = plan start + this

    @property
    def bins(self) -> int:
        return len(self.moves)

    @property
    def kind(self) -> str:
        """Protocol kind: a step without moves only changes the worker count."""
        return "moves" if self.moves else "noop"


@dataclass(frozen=True)
class Plan:
    """An ordered migration; `steps` compose from `current` to `target`."""

    strategy: str
    order: str
    base_version: int
    from_workers: int
    to_workers: int
    steps: tuple[PlanStep, ...]
    gap_s: float = 0.0
    knobs: dict[str, float] = field(default_factory=dict)

    @property
    def bins(self) -> int:
        return sum(s.bins for s in self.steps)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.steps)


def apply_moves(assignment: Sequence[int], moves: Sequence[Move]) -> list[int]:
    """The map after a step; refuses a move whose source is not the bin's owner (as the job does)."""
    out = list(assignment)
    for m in moves:
        if out[m.bin] != m.src:
            raise ValueError(f"bin {m.bin} is on worker {out[m.bin]}, not {m.src}")
        out[m.bin] = m.dst
    return out


def _priority(order: str, load: Sequence[float], size: Sequence[int]):  # type: ignore[no-untyped-def]
    if order == "hot-first":
        return lambda m: (-load[m.bin], -size[m.bin], m.bin)
    if order == "largest-first":
        return lambda m: (-size[m.bin], -load[m.bin], m.bin)
    if order == "smallest-first":
        return lambda m: (size[m.bin], load[m.bin], m.bin)
    if order == "by-id":
        return lambda m: m.bin
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
    moves: list[Move], strategy: str, step_size: int | None, byte_budget: int | None, size: Sequence[int], key
) -> list[list[Move]]:  # type: ignore[no-untyped-def]
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
    cost_model: "CostModel | None" = None,
    pause_budget_ms: float = 200.0,
) -> Plan:
    """Ordered steps from `current` (at `map_version`) to `target`.

    Worker-count rule: growing, workers = target_workers from the first step with a move into a
    new worker (new workers start empty); shrinking, from the step draining the last bin of the
    retired workers. A change of W with no bin to move is one move-less step. `auto` delegates to
    `costmodel.choose_plan`.
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
        from ballast.policy.costmodel import CostModel, choose_plan

        return choose_plan(
            current, map_version, target, current_workers, target_workers, size, load,
            model=cost_model or CostModel(), pause_budget_ms=pause_budget_ms, order=order,
            gap_s=gap_s, bin_keys=keys,
        )
    key = _priority(order, load, size)
    moves = sorted((Move(b, c, t) for b, (c, t) in enumerate(zip(current, target)) if c != t), key=key)
    groups = _group(moves, strategy, step_size, byte_budget, size, key)
    if not groups and current_workers != target_workers:
        groups = [[]]

    n = len(groups)
    if target_workers > current_workers:
        grow_at = next((i for i, g in enumerate(groups) if any(m.dst >= current_workers for m in g)), n - 1)
        workers = [current_workers if i < grow_at else target_workers for i in range(n)]
    elif target_workers < current_workers:
        drain_at = max((i for i, g in enumerate(groups) if any(m.src >= target_workers for m in g)), default=0)
        workers = [current_workers if i < drain_at else target_workers for i in range(n)]
    else:
        workers = [current_workers] * n

    steps = tuple(
        PlanStep(
            step=i + 1,
            moves=tuple(g),
            workers=workers[i],
            map_version=map_version + i,
            bytes=sum(size[m.bin] for m in g),
            keys=sum(keys[m.bin] for m in g),
            effective_offset_s=i * gap_s,
        )
        for i, g in enumerate(groups)
    )
    knobs: dict[str, float] = {"gap_s": gap_s}
    if step_size is not None:
        knobs["step_size"] = step_size
    if byte_budget is not None:
        knobs["byte_budget"] = byte_budget
    return Plan(strategy, order, map_version, current_workers, target_workers, steps, gap_s, knobs)
