"""Stage 3, place: the target map for a worker count, balancing measured per-bin load while
moving few bins and bytes (policy.place); the stats say what reaching it costs."""

from __future__ import annotations

import logging

from ballast import policy
from ballast.control.handoffs import BinLoad, Placement

log = logging.getLogger(__name__)


def place(assignment: tuple[int, ...], bins: BinLoad, target_workers: int) -> Placement:
    """Target map for `target_workers` from the current `assignment`."""
    old, load, size = list(assignment), list(bins.load), list(bins.bytes)
    new = policy.place(old, target_workers, load, size)
    st = policy.placement_stats(old, new, target_workers, load, size)
    log.info("placement for %d workers: %d bin(s), %s bytes move; max/mean load %.2f (lower bound %.2f)",
             target_workers, st.bins_moved, f"{st.bytes_moved:,}", st.max_over_mean,
             st.lower_bound / (sum(load) / target_workers) if sum(load) > 0 else 1.0)
    return Placement(target_workers, tuple(new), st.bins_moved, st.bytes_moved, st.max_over_mean)
