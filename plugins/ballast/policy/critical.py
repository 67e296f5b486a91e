"""What the critical path says about workers and bins (docs/tracing.md, docs/policy.md).

**Whether more workers would shorten the epochs.**
DS2 sizes the workers from their useful time; it cannot see that an epoch waits mostly on
something else — Spark's source stage, the driver's commit. The critical participation (CP) of
the window says how much of each epoch's critical path the workers hold (share s). Scaling W to
W' divides only that part (Amdahl's law on the critical path): the epoch shrinks to
(1 − s) + s·W/W' of its length. A scale-up whose predicted gain is below `min_gain` is not worth
its migration; the controller then keeps W and says where the time goes instead.

**Which bins are hot on it** (`bin_weights`). Placement balances each worker's load, counted in
records. A record's cost differs by key, though (a key whose state is large, a fold that calls out);
when the workers' folds hold the critical path, what must be balanced is their fold *time*, which
each worker measures per bin. Below that share the records stay the weight: balancing fold time
would shorten nothing that holds the epoch back, and records are exact where times are noisy.

**How long the workers were useful** (`useful_time`). DS2's true rate is records over *useful*
time. A worker's counter measures from the end of its input read to the end of its fold, which
includes bringing its bins up to date: a move's or pre-copy's load, a rebuilt cache's catch-up.
That is a one-off cost of a reconfiguration, not processing capacity; counted as useful it makes
the window after a migration look slow and DS2 asks for more workers than the load needs. The trace
separates the two (`prepare` and `fold` on each worker's timeline), so the fold is the useful time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_WORKER = re.compile(r" on worker \d+$")
_FOLD = re.compile(r"^fold on worker \d+$")
_WORKER_TIMELINE = re.compile(r"^worker (\d+)$")


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


@dataclass(frozen=True)
class BinWeights:
    """Placement's weight per bin and what it was read from."""

    load: tuple[float, ...]
    basis: str  # "records" | "fold time"
    reason: str


def folds_share(shares: Mapping[str, float]) -> float:
    """The workers' folds' part of the critical path (CP of `fold on worker N`)."""
    return sum(v for k, v in shares.items() if _FOLD.match(k))


def bin_weights(records: Sequence[float], fold_us: Sequence[int], shares: Mapping[str, float],
                min_share: float) -> BinWeights:
    """Each bin's measured fold time, scaled to the window's records (so a weight still reads as
    records and hot-first orders and split thresholds keep their meaning), when the workers' folds
    hold at least `min_share` of the critical path and the times cover the bins with records; else
    the records. `min_share` above 1: always the records."""
    rec = tuple(float(r) for r in records)
    total_us, total_rec = sum(fold_us), sum(rec)
    if min_share > 1:
        return BinWeights(rec, "records", "weighing bins by fold time is off (rebalance.critical_fold_share > 1)")
    if not shares:
        return BinWeights(rec, "records", "no stored traces in the window: bins weighed by records")
    share = folds_share(shares)
    if share < min_share:
        return BinWeights(rec, "records", f"the workers' folds hold {share:.0%} of the critical path (< "
                          f"{min_share:.0%}): bins weighed by records")
    if len(fold_us) != len(rec) or total_us <= 0 or total_rec <= 0 or any(
            r > 0 and t <= 0 for r, t in zip(rec, fold_us)):
        return BinWeights(rec, "records", "fold times not measured for every bin with records (a data plane "
                          "before schema 0006): bins weighed by records")
    scale = total_rec / total_us
    hot = max(range(len(rec)), key=lambda b: fold_us[b])
    return BinWeights(tuple(t * scale for t in fold_us), "fold time",
                      f"the workers' folds hold {share:.0%} of the critical path: bins weighed by their fold "
                      f"time (hottest: bin {hot} with {fold_us[hot] / total_us:.0%} of the time and "
                      f"{rec[hot] / total_rec:.0%} of the records)")


def folds_ms(activities: Iterable[tuple[int, str, str, int, int]]) -> dict[tuple[int, int], float]:
    """Each (epoch, worker)'s fold time in ms, from a trace's activities given as (epoch, timeline,
    kind, start µs, end µs); timelines other than `worker N` are the driver's."""
    out: dict[tuple[int, int], float] = {}
    for epoch, timeline, kind, start, end in activities:
        m = _WORKER_TIMELINE.match(timeline)
        if m and kind == "fold":
            key = (epoch, int(m.group(1)))
            out[key] = out.get(key, 0.0) + max(end - start, 0) / 1000.0
    return out


@dataclass(frozen=True)
class UsefulTime:
    """DS2's useful time per (epoch, worker) and what it was read from."""

    ms: Mapping[tuple[int, int], float]
    basis: str  # "trace" | "counters"
    reason: str


def useful_time(counters: Mapping[tuple[int, int], float], folds: Mapping[tuple[int, int], float],
                enabled: bool = True, traced: bool = False) -> UsefulTime:
    """The traces' fold times where they cover every worker epoch the counters saw busy, else the
    counters (a window half from each would mix two measures). The reason says how much of the
    counters' time was bringing bins up to date. `traced`: whether the window has stored traces at
    all; traces without a fold are a stateless operator's, whose
    counters hold nothing but its processing, and the reason says so rather than "no traces"."""
    if not enabled:
        return UsefulTime(dict(counters), "counters", "useful time from the workers' counters "
                          "(rebalance.useful_from_trace is off)")
    if not folds and not traced:
        return UsefulTime(dict(counters), "counters", "no stored traces in the window: useful time from the "
                          "workers' counters")
    if not folds:
        return UsefulTime(dict(counters), "counters", "the stored traces hold no fold (an operator without "
                          "state: its counters time its processing alone): useful time from the workers' counters")
    busy = [k for k, v in counters.items() if v > 0]
    missing = [k for k in busy if k not in folds]
    if missing:
        return UsefulTime(dict(counters), "counters", f"the traces miss the folds of {len(missing)} of "
                          f"{len(busy)} busy worker epochs: useful time from the workers' counters")
    ms = {k: folds.get(k, v) for k, v in counters.items()}
    total_c, total_f = sum(counters.values()), sum(ms.values())
    spent = max(total_c - total_f, 0.0)
    share = spent / total_c if total_c > 0 else 0.0
    return UsefulTime(ms, "trace", f"useful time from the traces' folds: {spent / 1000:.1f} s of the counters' "
                      f"{total_c / 1000:.1f} s ({share:.0%}) was bins brought up to date (moves, pre-copies, "
                      "catch-up), not processing")
