"""A worker's bins at the start of its epoch: which it owns under the map, and bringing each owned
or warm bin to the state after the previous epoch (step 2's first two points in spark_jobs.worker).

A bin is current (nothing to do), caught up from its changelog batches since its cache epoch, or
loaded whole from the durable state (snapshot + changelogs); bins the worker no longer owns or
warms are dropped from its cache. Apart from spark_jobs.worker because this is the one part of the
task that reads the durable state: a move's cost (keys, bytes, ms per bin) is measured here.
"""

from __future__ import annotations

import functools
import time
from typing import Any


@functools.lru_cache(maxsize=8)
def owned_bins(assignment: tuple[int, ...], worker: int) -> frozenset[int]:
    """The bins `worker` owns under a map; cached per Python worker process, which serves many
    epochs of one map (a set built from the map costs ~0.7 ms an epoch at B = 4096)."""
    return frozenset(b for b, w in enumerate(assignment) if w == worker)


def prepare_bins(cache: Any, txn: Any, src: Any, owned: set[int], warm: set[int], incoming: set[int],
                 target: int, k: int, handed: set[int] | frozenset[int] = frozenset(),
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Bring owned and warm bins to the state after `target`; drop the rest. Returns stats of the
    bins that moved in (cut-over) and of the bins warmed for a pre-copy step. `handed`: bins whose
    handover completes now (spark_jobs.handover): nothing of theirs moves; a fresh bin that is not
    current here (its last epoch ran on another executor) is rebuilt from the new owner's own objects."""
    cached = cache.cached_bins(txn)
    for b in sorted(cached.keys() - owned - warm):
        cache.drop_bin(txn, b, k)
    last_change = max((x.epoch for x in src.h.entries if x.epoch <= target), default=-1)
    moved: dict[str, Any] = {}
    warmed: dict[str, Any] = {}
    # set operations, not a loop over every owned bin: nothing to do for a current bin, and at
    # B = 4096 there are thousands of them each epoch
    current = {b for b, cur in cached.items() if last_change <= cur <= target} & (owned | warm)
    for b in sorted((owned | warm) - current | (incoming & current)):
        cur = cached.get(b)
        if b in current:  # pre-copied and nothing changed since: a free cut-over
            moved[str(b)] = {"keys": 0, "bytes": 0, "ms": 0.0, "mode": "handover" if b in handed else "warm"}
            continue
        t0 = time.perf_counter()
        if cur is not None and cur <= target and src.can_catch_up(cur):
            batches = src.changes_since(b, cur, target)
            mode = "catchup"
        else:
            if cur is not None:
                cache.drop_bin(txn, b, k)
            _, batches = src.full(b, target)
            mode = "load"
        nkeys = nbytes = 0
        for keys, values in batches:
            dk, db = cache.apply_changes(txn, b, keys, values)
            nkeys += dk
            nbytes += db
        cache.set_bin_at(txn, b, target)
        info = {"keys": nkeys, "bytes": nbytes, "ms": (time.perf_counter() - t0) * 1000, "mode": mode}
        if b in handed:  # a fresh bin rebuilt from its new owner's own objects (another executor ran it
            # last): nothing of the old owner's state moves, the rebuild is reported beside
            moved[str(b)] = {"keys": 0, "bytes": 0, "ms": info["ms"], "mode": "handover", "rebuilt": info}
        elif b in incoming:
            moved[str(b)] = info
        elif b in warm:
            warmed[str(b)] = info
    return moved, warmed
