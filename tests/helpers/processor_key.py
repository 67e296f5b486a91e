"""One grouping key of a stateful processor, driven without Spark the way a worker's epoch loop
drives it (spark_jobs.processing): its rows, then its timers due at a watermark in expiry order;
the key's state is saved as bytes and read back after every call, as between two epochs."""

from __future__ import annotations

from typing import Any

from spark_jobs.key_state import KeyState
from spark_jobs.processor import ExpiredTimerInfo, StatefulProcessorHandle, TimerValues


class ProcessorKey:
    def __init__(self, proc: Any, key: tuple, time_mode: str = "EventTime") -> None:
        self.key = key
        self.handle = StatefulProcessorHandle(time_mode, TimerValues(0, 0))
        self.state = KeyState()
        self.handle._current = self.state
        self.proc = proc
        self.proc.init(self.handle)

    def _saved(self) -> None:
        self.state = KeyState(self.state.to_bytes())
        self.handle._current = self.state

    def rows(self, *rows: Any) -> list[Any]:
        out = list(self.proc.handle_input_rows(self.key, iter(rows), self.handle.timer_values))
        self._saved()
        return out

    def fire(self, watermark: int) -> list[Any]:
        out: list[Any] = []
        for ts in sorted(t for t in self.state.timers if t <= watermark):
            self.state.timers.discard(ts)
            out += self.proc.handle_expired_timer(self.key, TimerValues(0, watermark), ExpiredTimerInfo(ts))
        self._saved()
        return out


def handle_on_key(now_ms: int, mode: str = "ProcessingTime") -> tuple[StatefulProcessorHandle, KeyState]:
    """A handle pointed at a fresh key's state, at processing time `now_ms` (no runtime around it)."""
    h = StatefulProcessorHandle(mode, TimerValues(now_ms, 0))
    ks = KeyState()
    h._current = ks
    return h, ks
