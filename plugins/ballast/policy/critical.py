"""Whether more workers would shorten the epochs, read from their critical path (docs/tracing.md).

DS2 sizes the workers from their useful time; it cannot see that an epoch waits mostly on
something else — Spark's source stage, the driver's commit. The critical participation (CP) of
the window says how much of each epoch's critical path the workers hold (share s). Scaling W to
W' divides only that part (Amdahl's law on the critical path): the epoch shrinks to
(1 − s) + s·W/W' of its length. A scale-up whose predicted gain is below `min_gain` is not worth
its migration; the controller then keeps W and says where the time goes instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_WORKER = re.compile(r" on worker \d+$")


def workers_share(shares: Mapping[str, float]) -> float:
    """The workers' part of the critical path: CP of activities on `worker N` timelines."""
    return sum(v for k, v in shares.items() if _WORKER.search(k))


def scale_up_gain(shares: Mapping[str, float], current: int, proposed: int) -> float:
    """The fraction by which W -> W' shortens the critical path (0 when W' <= W)."""
    if proposed <= current or current < 1:
        return 0.0
    s = min(max(workers_share(shares), 0.0), 1.0)
    return s * (1.0 - current / proposed)


def critical_path_check(shares: Mapping[str, float], current: int, proposed: int, min_gain: float) -> str | None:
    """A reason to keep W when a scale-up would shorten epochs by less than `min_gain`; None when it
    helps enough, when there is no trace, or when the check is off (`min_gain` 0)."""
    if proposed <= current or not shares or min_gain <= 0:
        return None
    gain = scale_up_gain(shares, current, proposed)
    if gain >= min_gain:
        return None
    outside = sorted(((k, v) for k, v in shares.items() if not _WORKER.search(k)), key=lambda kv: -kv[1])[:2]
    where = ", ".join(f"{k} {v:.0%}" for k, v in outside)
    return (f"the workers hold only {workers_share(shares):.0%} of the critical path ({where}): {current} -> "
            f"{proposed} workers would shorten epochs by {gain:.0%}, below the {min_gain:.0%} worth a migration")
