"""Hot bins: when raising the bin count (a split) lets placement balance what it cannot today.

A bin is the top k bits of a key's hash, so raising k by d splits every bin into 2^d sub-ranges
that stay on their worker: no key moves, the job only starts counting finer (docs/policy.md, "Hot
bins"). Placement can never do better than its hottest bin: when that bin alone exceeds a
worker's fair share, splitting it separates its keys, and the next placement can move the parts
that are not hot. One key alone is never split: a hot key keeps a worker to itself at best.
Pure Python, no framework import.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ballast.protocol import MAX_BINS


@dataclass(frozen=True)
class SplitAdvice:
    """`bins`: the bin count to raise to (None: no split); `reason` says why, either way."""

    bins: int | None
    reason: str
    hot_bin: int | None = None
    hot_share: float = 0.0  # the hottest bin's load ÷ a worker's fair share


def split_advice(load: Sequence[float], keys: Sequence[int], workers: int, tolerance: float,
                 max_bins: int = 4096) -> SplitAdvice:
    """Split when the hottest bin's load exceeds (1 + tolerance) × total ÷ `workers` and it holds more
    than one key. Raise k by d = ⌈log2(share)⌉ + 1 (so that, were its load spread over its keys, each
    part would fit with room to place), no further than its key count or `max_bins` allow."""
    bins = len(load)
    if len(keys) != bins:
        raise ValueError("load and keys must have one entry per bin")
    total = sum(load)
    if workers < 2 or total <= 0 or bins < 1:
        return SplitAdvice(None, "one worker or no load measured: nothing to balance")
    hot = max(range(bins), key=lambda b: (load[b], -b))
    share = load[hot] / (total / workers)
    if share <= 1 + tolerance:
        return SplitAdvice(None, f"the hottest bin ({hot}) is {share:.2f}x a worker's fair share: placement "
                           "can balance it", hot, share)
    if keys[hot] <= 1:
        return SplitAdvice(None, f"bin {hot} is {share:.2f}x a worker's fair share but holds one key: no split "
                           "can share a single key; it keeps a worker to itself at best", hot, share)
    d = max(1, min(math.ceil(math.log2(share)) + 1, int(math.log2(keys[hot]))))
    cap = min(max_bins, MAX_BINS)
    new = bins << d
    while new > cap and new > bins:
        new >>= 1
    if new <= bins:
        return SplitAdvice(None, f"bin {hot} is {share:.2f}x a worker's fair share, but the job is at the bin "
                           f"limit ({bins} of max_bins {max_bins})", hot, share)
    return SplitAdvice(new, f"bin {hot} carries {share:.2f}x a worker's fair share over {keys[hot]} keys: split "
                       f"{bins} -> {new} bins so placement can move its parts apart", hot, share)
