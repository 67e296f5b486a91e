"""Window processors that declare their windows, for the handover system tests
(tests/system/test_handover_job.py; docs/handover.md).

`SlidingCounts`: sliding event-time windows per user, 10 s long every 5 s (windows start at
k·5 000 ms and last 10 000 ms), 5 s of lateness, the input schema of
examples/operators/window_counts.py. Each row counts in every window that contains it (two); a
window's (count, total) lives in a MapState keyed by its start, and an event-time timer at the
window's end emits Row(user, window_start, count, total) and clears it: a window's results come
from its timer at its end, as a handover needs.

`StaggeredCounts`: `SlidingCounts` with each user's windows shifted by its phase (staggered).

`TumblingCounts`: window_counts' processor with the same settings as `window_counts.ballast_start()`
plus its windows declared (tumbling 10 s), so its bins can move by handover.

Spark loads the classes by module name: ship this file and window_counts.py with addPyFile.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import Row

from ballast.policy.handover import WindowSpec
from spark_jobs.processor import query

try:
    import window_counts as wc
except ImportError:  # not shipped and not on the path yet: the example beside the repo's tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "operators"))
    import window_counts as wc

WINDOW_MS = 10_000
SLIDE_MS = 5_000
LATENESS_MS = 5_000
INPUT_SCHEMA = wc.INPUT_SCHEMA  # "user string, ts timestamp, amount long"
OUTPUT_SCHEMA = wc.OUTPUT_SCHEMA


def window_starts(ms: int) -> list[int]:
    """The starts of the windows containing event time `ms`: k·SLIDE_MS in (ms − WINDOW_MS, ms]."""
    last = ms - ms % SLIDE_MS
    return [s for s in range(last - WINDOW_MS + SLIDE_MS, last + 1, SLIDE_MS)]


class SlidingCountsProcessor(wc.WindowCountsProcessor):
    """window_counts' processor (its state, and its timer that emits a window and clears it) with
    each row counted in every window that contains it."""

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        for row in rows:
            ms = int(row.ts.timestamp() * 1000)
            for start in self.starts(key[0], ms):
                count, total = self.windows.getValue((start,)) or (0, 0)
                if count == 0:
                    self.handle.registerTimer(start + WINDOW_MS)
                self.windows.updateValue((start,), (count + 1, total + row.amount))
        return iter([])

    def starts(self, user: str, ms: int) -> list[int]:
        """The starts of the user's windows that contain `ms`."""
        return window_starts(ms)


SlidingCounts = query(SlidingCountsProcessor, input_schema=INPUT_SCHEMA, grouping_keys=("user",),
                      time_mode="EventTime", event_time_column="ts", lateness_ms=LATENESS_MS,
                      window=WindowSpec(WINDOW_MS, SLIDE_MS))

STAGGERED = WindowSpec(WINDOW_MS, SLIDE_MS, staggered=True)


def staggered_starts(user: str, ms: int) -> list[int]:
    """`window_starts` on the user's own grid, shifted by its phase (`WindowSpec.phase_of`)."""
    phase = STAGGERED.phase_of((user,))
    return [s + phase for s in window_starts(ms - phase)]


class StaggeredCountsProcessor(SlidingCountsProcessor):
    """`SlidingCountsProcessor` with each user's windows on a grid of its own (Flink's WindowStagger):
    the handover then splits each key's rows at its own boundary, which the routing computes in the JVM."""

    def starts(self, user: str, ms: int) -> list[int]:
        return staggered_starts(user, ms)


StaggeredCounts = query(StaggeredCountsProcessor, input_schema=INPUT_SCHEMA, grouping_keys=("user",),
                        time_mode="EventTime", event_time_column="ts", lateness_ms=LATENESS_MS, window=STAGGERED)

TumblingCounts = query(wc.WindowCountsProcessor, input_schema=wc.INPUT_SCHEMA, grouping_keys=("user",),
                       time_mode="EventTime", event_time_column="ts", lateness_ms=wc.LATENESS_MS,
                       window=WindowSpec(wc.WINDOW_MS))
