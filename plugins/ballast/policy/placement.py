"""Placement: the target bin→worker map for a new worker count.

Goal, in priority order: (1) every worker's measured load within `(1 + tolerance) ·` mean, or as
close as the hottest bin allows; (2) move as few bins and bytes as possible — bins stay where they
are unless their worker is retired or over capacity, and a new worker is fed by stealing from the
most loaded ones; (3) deterministic: every tie is broken by ids, so a re-run of the DAG computes
the same map.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_EPS = 1e-12


def uniform_map(bins: int, workers: int) -> list[int]:
    """Initial map: contiguous ranges, assignment[bin] = bin·W // B."""
    if bins < 1 or workers < 1:
        raise ValueError("bins and workers must be >= 1")
    return [b * workers // bins for b in range(bins)]


def worker_loads(assignment: Sequence[int], load: Sequence[float], workers: int) -> list[float]:
    out = [0.0] * workers
    for b, w in enumerate(assignment):
        out[w] += load[b]
    return out


def moved_bins(old: Sequence[int], new: Sequence[int]) -> list[int]:
    return [b for b, (o, n) in enumerate(zip(old, new, strict=True)) if o != n]


@dataclass(frozen=True)
class PlacementStats:
    """What a person checks before approving a map: balance and migration volume."""

    workers: int
    loads: tuple[float, ...]
    max_over_mean: float
    lower_bound: float  # max(hottest bin, mean): no map can do better
    bins_moved: int
    bytes_moved: int


def placement_stats(
    old: Sequence[int], new: Sequence[int], workers: int, load: Sequence[float], bytes_: Sequence[int] | None = None
) -> PlacementStats:
    loads = worker_loads(new, load, workers)
    mean = sum(load) / workers
    moved = moved_bins(old, new)
    return PlacementStats(
        workers=workers,
        loads=tuple(loads),
        max_over_mean=max(loads) / mean if mean > 0 else 1.0,
        lower_bound=max(max(load, default=0.0), mean),
        bins_moved=len(moved),
        bytes_moved=sum(bytes_[b] for b in moved) if bytes_ else 0,
    )


def _hot_bins(weights: Sequence[float], workers: int, tolerance: float) -> tuple[set[int], float]:
    """Bins too heavy to share a worker: each gets one to itself.

    Peel the heaviest bin while it exceeds (1 + tolerance) × (remaining load / remaining
    workers); the rest is balanced over the remaining workers. max(hot bin, rest mean) is then
    the best possible maximum. A bin within the tolerance is not hot: isolating it would cost
    moves and buy nothing the tolerance does not already allow.
    """
    order = sorted(range(len(weights)), key=lambda b: (-weights[b], b))
    rest, hot = sum(weights), set[int]()
    for b in order:
        k = len(hot)
        if k >= workers - 1 or weights[b] <= (1 + tolerance) * rest / (workers - k) + _EPS:
            break
        hot.add(b)
        rest -= weights[b]
    return hot, rest / (workers - len(hot))


def place(
    assignment: Sequence[int],
    new_workers: int,
    load: Sequence[float],
    bytes_: Sequence[int] | None = None,
    tolerance: float = 0.05,
    max_refine: int = 10_000,
) -> list[int]:
    """Target map for `new_workers` from the current map and per-bin load (and bytes).

    1. Bins on retired workers (id >= new_workers) join a pool.
    2. A hot bin (heavier than the mean of the rest) keeps a worker to itself. Capacity of the
       other workers = max(their mean · (1 + tolerance), largest other bin). One over it sheds:
       the smallest bin that alone removes the excess (fewest moves, least overshoot), else its
       largest bin, and repeat. New workers start empty, so they are fed from the shed bins of
       the most loaded workers.
    3. Homeless hot bins take the least loaded worker (which gives up its other bins); then the
       pool is placed by LPT: hottest bin first onto the least loaded worker (ties: lower bytes,
       lower id).
    4. Refinement: while it lowers the maximum, move one bin (or swap two) between the most and the
       least loaded worker. This only runs if 2-3 left the maximum above capacity.
    Zero total load (no measurements yet) falls back to bytes, then to bin counts.
    """
    B = len(assignment)
    if len(load) != B or (bytes_ is not None and len(bytes_) != B):
        raise ValueError("load and bytes must have one entry per bin")
    if new_workers < 1:
        raise ValueError("new_workers must be >= 1")
    if any(x < 0 for x in load):
        raise ValueError("loads must be >= 0")
    weights = list(map(float, load))
    if sum(weights) <= 0:
        weights = [float(x) for x in bytes_] if bytes_ and sum(bytes_) > 0 else [1.0] * B
    size = list(bytes_) if bytes_ is not None else [0] * B
    W = new_workers
    mean = sum(weights) / W
    hot, rest_mean = _hot_bins(weights, W, tolerance)
    non_hot_max = max((x for b, x in enumerate(weights) if b not in hot), default=0.0)
    cap = max(non_hot_max, rest_mean * (1 + tolerance))

    owned: list[list[int]] = [[] for _ in range(W)]
    pool: list[int] = []
    for b, w in enumerate(assignment):
        (owned[w] if 0 <= w < W else pool).append(b)
    loads = [sum(weights[b] for b in bins) for bins in owned]

    def shed(w: int, b: int) -> None:
        owned[w].remove(b)
        loads[w] -= weights[b]
        pool.append(b)

    # 2a. a worker keeps at most one hot bin (its heaviest); it may keep small bins up to
    #     max(that bin, mean · (1 + tolerance)) so a bin barely above the mean costs no moves
    keep_hot: dict[int, int] = {}
    for w in range(W):
        mine = sorted((b for b in owned[w] if b in hot), key=lambda b: (-weights[b], b))
        if mine:
            keep_hot[w] = mine[0]
            for b in mine[1:]:
                shed(w, b)
    pinned = set(keep_hot)

    def cap_of(w: int) -> float:
        return max(weights[keep_hot[w]], mean * (1 + tolerance)) if w in keep_hot else cap

    # 2b. shed excess from over-capacity workers, most loaded first
    for w in sorted(range(W), key=lambda w: (-loads[w], w)):
        while loads[w] > cap_of(w) + _EPS:
            movable = [b for b in owned[w] if b != keep_hot.get(w)]
            if not movable:
                break
            excess = loads[w] - cap_of(w)
            enough = [b for b in movable if weights[b] >= excess - _EPS]
            if enough:
                b = min(enough, key=lambda b: (weights[b], size[b], b))
            else:
                b = max(movable, key=lambda b: (weights[b], -size[b], -b))
            shed(w, b)

    # 3a. homeless hot bins take the least loaded unpinned worker, which gives up its other bins
    for b in sorted((b for b in pool if b in hot), key=lambda b: (-weights[b], b)):
        w = min((w for w in range(W) if w not in pinned), key=lambda w: (loads[w], w))
        pool.remove(b)
        for c in list(owned[w]):
            shed(w, c)
        owned[w].append(b)
        loads[w] += weights[b]
        pinned.add(w)
    free = [w for w in range(W) if w not in pinned]
    # 3b. LPT for the rest of the pool over unpinned workers
    for b in sorted(pool, key=lambda b: (-weights[b], -size[b], b)):
        w = min(free, key=lambda w: (loads[w], w))
        owned[w].append(b)
        loads[w] += weights[b]

    # 4. refine between the extremes of the unpinned workers while their maximum drops
    for _ in range(max_refine if len(free) > 1 else 0):
        hi = max(free, key=lambda w: (loads[w], -w))
        lo = min(free, key=lambda w: (loads[w], w))
        gap = loads[hi] - loads[lo]
        if loads[hi] <= cap + _EPS or gap <= _EPS:
            break
        best: tuple[float, int, int, int, int] | None = None  # (new max, bytes, -, a, b)
        for a in owned[hi]:
            if 0 < weights[a] < gap - _EPS:
                m = max(loads[hi] - weights[a], loads[lo] + weights[a])
                cand = (m, size[a], 0, a, -1)
                best = cand if best is None or cand < best else best
        if best is None or best[0] >= loads[hi] - _EPS:
            for a in owned[hi]:
                for c in owned[lo]:
                    d = weights[a] - weights[c]
                    if 0 < d < gap - _EPS:
                        m = max(loads[hi] - d, loads[lo] + d)
                        cand = (m, size[a] + size[c], 1, a, c)
                        best = cand if best is None or cand < best else best
        if best is None or best[0] >= loads[hi] - _EPS:
            break
        _, _, _, a, c = best
        owned[hi].remove(a)
        owned[lo].append(a)
        loads[hi] -= weights[a]
        loads[lo] += weights[a]
        if c >= 0:
            owned[lo].remove(c)
            owned[hi].append(c)
            loads[lo] -= weights[c]
            loads[hi] += weights[c]

    out = [0] * B
    for w, bins in enumerate(owned):
        for b in bins:
            out[b] = w
    return out
