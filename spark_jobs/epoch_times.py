"""Where an epoch's wall time goes, logged with every epoch (`epoch N time ms: ...`).

Two halves. Inside `foreachBatch` (Spark's `addBatch`) the runner laps its own phases: reading the
control records, the decision, building the epoch's DataFrame (`plan`), the Spark job that applies
and writes it (`spark`), the durable manifest, the backlog lookup, the DB commit and the acks.
Outside it, Spark's own per-batch work (`latestOffset`, `walCommit`, `queryPlanning`,
`commitOffsets`), from the query's progress of the batch before. bench.epoch_profile reads these
lines to say, per query, what a Ballast epoch pays that Spark's own query does not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: Spark's per-batch durations outside `addBatch` (StreamingQueryProgress.durationMs)
SPARK_OUTSIDE = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "commitOffsets")


class EpochTimes:
    """Laps of one epoch's phases, in milliseconds, in the order they ran; and each lap's span on
    the wall clock (microseconds since the Unix epoch), which the epoch's trace places beside the
    tasks' spans (spark_jobs.epoch_trace)."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 wall: Callable[[], float] = time.time) -> None:
        self._clock = clock  # seconds; a test gives its own
        self._wall = wall
        self._t = clock()
        self._w = int(wall() * 1e6)
        self.ms: dict[str, float] = {}
        self.spans: list[tuple[str, int, int]] = []  # (phase, start µs, end µs) in the order they ran

    def lap(self, phase: str) -> None:
        """The time since the last lap belongs to `phase` (added, when a phase comes back)."""
        now = self._clock()
        self.ms[phase] = self.ms.get(phase, 0.0) + (now - self._t) * 1000
        self._t = now
        w = int(self._wall() * 1e6)
        self.spans.append((phase, self._w, max(w, self._w)))
        self._w = w

    def text(self, spark_outside: dict[str, float] | None = None) -> str:
        inside = ", ".join(f"{k} {v:.0f}" for k, v in self.ms.items())
        if not spark_outside:
            return inside
        outside = ", ".join(f"{k} {v:.0f}" for k, v in spark_outside.items())
        return f"{inside}; Spark outside the batch before: {outside}"


def spark_outside(query: Any) -> dict[str, float]:
    """Spark's own durations outside `addBatch` of the query's last completed batch ({} before one)."""
    try:
        progress = query.lastProgress if query is not None else None
    except Exception:  # a progress we cannot read only costs the log line its second half
        return {}
    if not progress:
        return {}
    d = progress["durationMs"] if isinstance(progress, dict) else progress.durationMs
    return {k: float(d[k]) for k in SPARK_OUTSIDE if k in d}
