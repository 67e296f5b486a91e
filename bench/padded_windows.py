"""The handover experiment's operator: a count per key and tumbling event-time window whose state
per (key, window) is `BALLAST_BENCH_VALUE_BYTES` long, so open windows reach hundreds of MB.

Input: the load generator's records (Kafka key `k%09d`, value = the record's scheduled time in µs,
which is its event time). Each window's count is emitted by its event-time timer at the window's
end, so the operator's bins can move by handover (docs/handover.md); the window length comes from
`BALLAST_BENCH_WINDOW_MS` (its Spark Python workers inherit the job's environment in local mode).
The padding is the key's (bench.padded.padding), so a replayed fold writes the same bytes. Run it as
`--operator windows=bench.padded_windows:PaddedWindows`.

`StaggeredWindows` is the same count with each key's windows shifted by a phase of its own (the
framework's `WindowSpec.phase_of`, as Flink's `WindowStagger` is its window assigner's), so
windows close spread over the window's length instead of every key's at one instant — the shape
a large windowed state takes when its owner does not want one epoch to pay every key's close
(docs/handover.md, "Staggered windows").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ballast.options import env_var, settings
from ballast.policy.handover import WindowSpec
from bench.padded import padding, value_bytes
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query

WINDOW_ENV = env_var("bench_window_ms")
LATENESS_MS = 2_000


def window_start(ms: int, phase: int, window_ms: int) -> int:
    """The start of the window holding event time `ms` on a grid shifted by `phase`."""
    return ms - (ms - phase) % window_ms


def stagger_phase(key: str, window_ms: int) -> int:
    """A key's phase in [0, window): the framework's (`WindowSpec.phase_of`), which the handover
    computes too, so that each key hands over on its own grid."""
    return WindowSpec(window_ms, staggered=True).phase_of((key,))


class PaddedWindowsProcessor(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.window_ms = settings().bench_window_ms
        self.pad = max(0, value_bytes() - 8)
        self.windows = handle.getMapState("windows", "start long", "count long, pad binary")

    def phase(self, key: str) -> int:
        """The key's grid offset (0: every key's windows on one grid)."""
        return 0

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
        phase = self.phase(key[0])
        for row in rows:
            ms = int(row.ts.timestamp() * 1000)
            start = window_start(ms, phase, self.window_ms)
            got = self.windows.getValue((start,))
            if got is None:
                self.handle.registerTimer(start + self.window_ms)
                got = (0, padding(key[0].encode(), self.pad))
            self.windows.updateValue((start,), (got[0] + 1, got[1]))
        return iter([])

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        start = expiredTimerInfo.getExpiryTimeInMs() - self.window_ms
        got = self.windows.getValue((start,))
        if got is not None:
            self.windows.removeKey((start,))
            yield {"key": key[0], "window_start": start, "count": got[0]}


PaddedWindows = query(PaddedWindowsProcessor, grouping_keys=("key",), time_mode="EventTime",
                      event_time_column="ts", lateness_ms=LATENESS_MS,
                      columns=(("ts", "timestamp_micros(try_cast(value AS BIGINT))"),),
                      window=WindowSpec(settings().bench_window_ms))


class StaggeredWindowsProcessor(PaddedWindowsProcessor):
    def phase(self, key: str) -> int:
        return stagger_phase(key, self.window_ms)


StaggeredWindows = query(StaggeredWindowsProcessor, grouping_keys=("key",), time_mode="EventTime",
                         event_time_column="ts", lateness_ms=LATENESS_MS,
                         columns=(("ts", "timestamp_micros(try_cast(value AS BIGINT))"),),
                         window=WindowSpec(settings().bench_window_ms, staggered=True))
