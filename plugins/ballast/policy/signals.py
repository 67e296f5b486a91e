"""When a running job asks for a rebalance now instead of waiting for the schedule.

The rebalance DAG runs on a schedule (every 2 minutes in the demo); a load step waits up to a
whole interval before DS2 even looks. The job's driver sees DS2's inputs every epoch, so it
raises a *signal* (a compact Kafka message on `<job>.signals`) when they cross the thresholds the
guards use: the backlog has grown for `epochs` epochs in a row, or the epochs have been busier
(or idler) than the utilization band for as long. An Airflow asset watcher on that topic starts
the rebalance DAG at once; DS2 and the guards still decide (a signal only wakes them), and the
schedule stays as the safety net. Not a decision: a false alarm costs one DAG run that keeps W.

Busy is `batch time ÷ budget` per epoch (budget: the trigger interval, else the rebalance's
`batch_budget_s`): the micro-batch model's utilization, which the driver has without a query.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: the thresholds' names in a signal's `reason` (the watcher and the console show them)
GROWING, BUSY, IDLE = "backlog_growing", "busy", "idle"


@dataclass(frozen=True)
class SignalConfig:
    """Thresholds of one job's signals (from its jobs.yaml `rebalance:` section)."""

    epochs: int = 5  # this many epochs in a row; 0: no signals
    hold_s: float = 60.0  # at most one signal per this many seconds
    idle_hold_s: float = 600.0  # …and one `idle` per this many (the guards hold a scale-down this long)
    busy_low: float = 0.5  # target_utilization - utilization_band
    busy_high: float = 0.9  # target_utilization + utilization_band
    budget_ms: float = 1000.0
    min_workers: int = 1  # no `idle` signal at the floor, no `busy` one at the ceiling
    max_workers: int = 1 << 16

    def __post_init__(self) -> None:
        if self.epochs < 0 or self.hold_s < 0 or self.idle_hold_s < 0 or self.budget_ms <= 0:
            raise ValueError(f"bad signal thresholds: {self}")
        if not 0 <= self.busy_low <= self.busy_high:
            raise ValueError(f"need 0 <= busy_low ({self.busy_low}) <= busy_high ({self.busy_high})")


@dataclass(frozen=True)
class EpochLoad:
    """What one committed epoch tells the signal: its backlog after it, its batch time, W."""

    epoch: int
    backlog: int
    batch_ms: float
    workers: int


@dataclass(frozen=True)
class Signal:
    reason: str  # GROWING | BUSY | IDLE
    detail: str  # one line for people: the figures that crossed
    epoch: int
    backlog: int
    busy: float  # mean batch time ÷ budget over the window


class Signaller:
    """Feeds on committed epochs; says when to signal. State: the last `epochs` epochs and the
    time of the last signal (a restarted driver may signal once more at once: harmless)."""

    def __init__(self, cfg: SignalConfig) -> None:
        self.cfg = cfg
        self._window: deque[EpochLoad] = deque(maxlen=max(1, cfg.epochs) + 1)
        self._last_at: float | None = None
        self._last_idle_at: float | None = None

    def observe(self, load: EpochLoad, now_s: float) -> Signal | None:
        """The signal this epoch raises, if any (and it is not held back)."""
        c = self.cfg
        if c.epochs == 0:
            return None
        if self._window and load.epoch <= self._window[-1].epoch:  # a replayed epoch: start over
            self._window.clear()
        self._window.append(load)
        if self._last_at is not None and now_s - self._last_at < c.hold_s:
            return None
        found = crossing(list(self._window), c)
        if found is None:
            return None
        if found.reason == IDLE and self._last_idle_at is not None and now_s - self._last_idle_at < c.idle_hold_s:
            return None
        self._last_at = now_s
        if found.reason == IDLE:
            self._last_idle_at = now_s
        return found


def crossing(window: list[EpochLoad], c: SignalConfig) -> Signal | None:
    """The threshold the newest `c.epochs` epochs cross, if any (backlog growth first)."""
    if c.epochs == 0 or len(window) < c.epochs:
        return None
    last, recent = window[-1], window[-c.epochs:]
    busy = sum(e.batch_ms for e in recent) / len(recent) / c.budget_ms
    if len(window) > c.epochs and last.workers < c.max_workers:
        run = window[-(c.epochs + 1):]  # epochs + 1 backlogs: `epochs` increases
        if all(b.backlog > a.backlog for a, b in zip(run, run[1:], strict=False)):
            return Signal(GROWING, f"backlog grew for {c.epochs} epochs in a row: {run[0].backlog} -> "
                          f"{last.backlog} records", last.epoch, last.backlog, busy)
    side = _busy_side(recent, c)
    if side == BUSY and last.workers < c.max_workers:
        return Signal(BUSY, f"batch time {busy:.0%} of the budget ({c.budget_ms:.0f} ms) over {c.epochs} epochs, "
                      f"above {c.busy_high:.0%}", last.epoch, last.backlog, busy)
    if side == IDLE and last.workers > c.min_workers and last.backlog == 0:
        return Signal(IDLE, f"batch time {busy:.0%} of the budget ({c.budget_ms:.0f} ms) over {c.epochs} epochs, "
                      f"below {c.busy_low:.0%}, no backlog", last.epoch, last.backlog, busy)
    return None


def _busy_side(recent: list[EpochLoad], c: SignalConfig) -> str | None:
    """BUSY when every one of the epochs was above the band, IDLE when every one was below."""
    ratios = [e.batch_ms / c.budget_ms for e in recent]
    if all(r > c.busy_high for r in ratios):
        return BUSY
    if all(r < c.busy_low for r in ratios):
        return IDLE
    return None
