"""Autotuning a job's settings: the trigger interval and the records per epoch (docs/policy.md, "Autotuning").

DS2 decides how many workers a job needs; this decides how it batches, with the same micro-batch
model (ballast.policy.ds2.ds2_microbatch): an epoch of n rows lasts D(n) = o + c·n, o the fixed cost
of an epoch (Spark's planning, the commit) and c the seconds of work per row at the current worker
count. With a trigger interval I ≥ D, epochs start I apart and read λ·I rows each (λ the input
rate); a record waits up to I for its epoch and then D, so

    p99 ≈ I + t·(o + c·λ·I)      (the job keeps up iff D(λ·I) ≤ I, i.e. I ≥ o / (1 − c·λ))

with t the slow-epoch factor: the window's slowest epoch over its median (1 when every epoch lasts
alike; a snapshot epoch, a garbage collection or a busy machine make some epochs last longer than
the model's mean D, and those set the p99). The cost per event, o / (λ·I) + c, falls as I grows.
The cheapest interval that meets a latency goal G (less a margin) is therefore the largest one:
I* = (G·(1 − margin) − t·o) / (1 + t·c·λ), never below the keep-up bound. When even the keep-up
bound misses the goal, the goal is out of reach at this worker count: the advice says so (DS2
scales the workers; this tunes within them).

The records per epoch bound one epoch after a burst or a restart: enough for (1 + headroom) times
the rate over an interval, so a backlog drains, and otherwise no more than an epoch can process
within the goal. Guards like DS2's: a change smaller than `min_change` is not made, one decision
moves the interval by at most `max_factor`, and a change waits `hold_s` after the one before —
unless the interval in force misses the goal itself and the advice shortens it (a load step up).
Pure: no framework, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class TuneConfig:
    """A job's latency goal and the tuner's limits (the jobs file's `rebalance.autotune`)."""

    latency_goal_ms: float
    margin: float = 0.2  # aim below the goal by this share (the model's error, a GC pause)
    min_trigger_ms: int = 100
    max_trigger_ms: int = 60_000
    headroom: float = 0.5  # records per epoch: this much above the rate, so a backlog drains
    min_change: float = 0.2  # a relative change of the interval below this is not made
    max_factor: float = 4.0  # one decision moves the interval by at most this factor
    hold_s: float = 120.0  # after a change, the next waits this long (its effect must show first)

    def __post_init__(self) -> None:
        if self.latency_goal_ms <= 0 or not 0 <= self.margin < 1 or self.headroom < 0 or self.max_factor < 1:
            raise ValueError(f"bad autotune configuration: {self}")
        if not 0 <= self.min_trigger_ms <= self.max_trigger_ms:
            raise ValueError(f"need 0 <= min_trigger_ms ({self.min_trigger_ms}) <= max_trigger_ms "
                             f"({self.max_trigger_ms})")


@dataclass(frozen=True)
class TuneInputs:
    """What the metrics say about the job now (a window of epochs, as DS2 reads it)."""

    rate_rows_s: float  # λ: input rate (with DS2's catch-up share of a backlog)
    overhead_s: float  # o: fixed cost of an epoch (ballast.policy.rates.estimate_overhead_s)
    per_row_s: float  # c: seconds of work per input row at the current worker count
    trigger_ms: int  # the interval in force
    max_records_per_epoch: int | None  # the cap in force (None: none)
    slow_epoch_factor: float = 1.0  # t: the window's slowest epoch over its median (≥ 1; `slow_epoch_factor`)


@dataclass(frozen=True)
class TuneAdvice:
    """The settings the model advises, whether to send them, and why (stored with the decision)."""

    trigger_ms: int
    max_records_per_epoch: int
    predicted_p99_ms: float  # at the advised settings
    current_p99_ms: float  # at the settings in force
    feasible: bool  # the goal is reachable at this worker count
    keep_up_ms: int  # the shortest interval the workers keep up with, rounded up to 10 ms (back to back below)
    change: bool  # send a settings step
    reason: str


def back_to_back_s(inp: TuneInputs) -> float:
    """How long an epoch lasts when each starts as the one before ends: o / (1 − c·λ) (the shortest
    interval the job keeps up with; infinite when the workers cannot keep up at all)."""
    load = max(inp.per_row_s, 0.0) * max(inp.rate_rows_s, 0.0)
    return max(inp.overhead_s, 0.0) / (1 - load) if load < 1 else math.inf


def slow_epoch_factor(batch_ms: list[float], limit: float = 3.0) -> float:
    """t: the slowest epoch of a window over its median epoch, within [1, `limit`] (a window's one
    outlier, a restart's first epoch, must not set the interval alone). 1 for fewer than 3 epochs."""
    xs = sorted(b for b in batch_ms if b > 0)
    if len(xs) < 3:
        return 1.0
    mid = xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
    return min(max(xs[-1] / mid, 1.0), limit)


def predicted_p99_ms(interval_s: float, inp: TuneInputs) -> float:
    """p99 latency at interval I: I + t·(o + c·λ·I) while epochs fit in I; below that they run back
    to back and a record waits up to one epoch, then one more of the tail's: (1 + t)·o / (1 − c·λ)
    (the two agree at the bound)."""
    bound = back_to_back_s(inp)
    if not math.isfinite(bound):
        return math.inf
    tail = max(inp.slow_epoch_factor, 1.0)
    if interval_s <= bound:
        return 1000.0 * (1 + tail) * bound
    return 1000.0 * (interval_s + tail * (max(inp.overhead_s, 0.0) + max(inp.per_row_s, 0.0)
                                          * max(inp.rate_rows_s, 0.0) * interval_s))


def advise(inp: TuneInputs, cfg: TuneConfig, now_s: float, last_change_s: float | None) -> TuneAdvice:
    """The cheapest settings that meet the goal, within the guards."""
    lam, o, c = max(inp.rate_rows_s, 0.0), max(inp.overhead_s, 0.0), max(inp.per_row_s, 0.0)
    tail = max(inp.slow_epoch_factor, 1.0)
    goal_s = cfg.latency_goal_ms / 1000.0 * (1 - cfg.margin)
    current = predicted_p99_ms(inp.trigger_ms / 1000.0, inp)
    bound = back_to_back_s(inp)
    if not math.isfinite(bound):
        return TuneAdvice(inp.trigger_ms, inp.max_records_per_epoch or 0, math.inf, current, False, 0, False,
                          f"the workers cannot keep up with {lam:,.0f} rows/s at any interval (c·λ = {c * lam:.2f}): "
                          "scaling them is DS2's decision; the settings are kept")
    best_s = (goal_s - tail * o) / (1 + tail * c * lam)
    feasible = best_s >= bound
    wanted_s = best_s if feasible else bound  # out of reach: the lowest latency (and cheapest) the workers allow
    now = inp.trigger_ms / 1000.0
    lo = max(cfg.min_trigger_ms / 1000.0, now / cfg.max_factor if now > 0 else 0.0)
    hi = min(cfg.max_trigger_ms / 1000.0, now * cfg.max_factor if now > 0 else math.inf)
    interval_s = min(max(wanted_s, lo), hi)
    interval_s = max(interval_s, min(bound, cfg.max_trigger_ms / 1000.0))  # below keep-up: no faster, dearer
    trigger_ms = _ceil10(interval_s)
    drain = max(math.ceil((1 + cfg.headroom) * lam * trigger_ms / 1000.0), 1)
    within_goal = (goal_s - tail * o) / (tail * c) if c > 0 else math.inf  # rows an epoch processes within the goal
    cap = max(drain, int(within_goal)) if math.isfinite(within_goal) else drain
    predicted = predicted_p99_ms(trigger_ms / 1000.0, inp)
    rel = abs(trigger_ms - inp.trigger_ms) / max(inp.trigger_ms, 1)
    # the hold keeps a change's effect from being judged before it shows; it does not keep the goal
    # missed: an interval the model says misses the goal itself is shortened at once (as DS2 scales up
    # faster than down)
    urgent = current > cfg.latency_goal_ms and trigger_ms < inp.trigger_ms
    held = last_change_s is not None and now_s - last_change_s < cfg.hold_s and not urgent
    why = (f"rate {lam:,.0f} rows/s, epoch overhead {o * 1000:,.0f} ms, {c * 1e6:,.1f} µs per row"
           + (f", slowest epoch {tail:.2f}× the median" if tail > 1 else "") + ": interval "
           f"{inp.trigger_ms} -> {trigger_ms} ms predicts p99 {current:,.0f} -> {predicted:,.0f} ms against a goal "
           f"of {cfg.latency_goal_ms:,.0f} ms")
    if not feasible:
        why += (f"; the goal is out of reach at this worker count (epochs back to back last "
                f"{bound * 1000:,.0f} ms): scaling is DS2's decision")
    change = rel >= cfg.min_change and not held
    if rel < cfg.min_change:
        why += f"; a {rel:.0%} change is below the {cfg.min_change:.0%} threshold: kept"
    elif held:
        why += f"; held: the last change was {now_s - (last_change_s or 0.0):.0f} s ago (hold {cfg.hold_s:.0f} s)"
    elif urgent and last_change_s is not None and now_s - last_change_s < cfg.hold_s:
        why += "; not held: the interval in force misses the goal"
    return TuneAdvice(trigger_ms, cap, predicted, current, feasible, _ceil10(bound), change, why)


def _ceil10(seconds: float) -> int:
    """Whole 10 ms, rounded up."""
    return int(math.ceil(seconds * 100 - 1e-9)) * 10
