"""Where an epoch's wall time goes, logged with every epoch (`epoch N time ms: ...`).

Two halves. Inside `foreachBatch` (Spark's `addBatch`) the runner laps its own phases: reading the
control records, the decision, building the epoch's DataFrame (`plan`), the Spark job that applies
and writes it (`spark`), the durable manifest, the backlog lookup, the DB commit and the acks.
Outside it, Spark's own per-batch work (`latestOffset`, `walCommit`, `queryPlanning`,
`commitOffsets`), from the query's progress of the batch before. `parse_log` reads the lines back
(the benchmarks: bench.epoch_profile says per query what a Ballast epoch pays that Spark's own
query does not; the latency, cluster and spike experiments split an epoch into apply, DB and acks).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

#: Spark's per-batch durations outside `addBatch` (StreamingQueryProgress.durationMs)
SPARK_OUTSIDE = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "commitOffsets")
#: the runner's log line: `epoch N time ms: <phase ms, ...>[; Spark outside the batch before: <name ms, ...>]`
OUTSIDE = "; Spark outside the batch before: "
_LINE = re.compile(r"epoch (\d+) time ms: (.*)$", re.MULTILINE)
_PAIR = re.compile(r"([A-Za-z]+) (\d+(?:\.\d+)?)")


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
        return f"{inside}{OUTSIDE}{outside}"


def parse_log(text: str) -> dict[int, tuple[dict[str, float], dict[str, float]]]:
    """epoch -> (its phases inside the batch, Spark's durations outside the batch before it), from a
    job log's `epoch N time ms:` lines (what `EpochTimes.text` wrote; a later line of the same epoch,
    a replay, wins)."""
    out: dict[int, tuple[dict[str, float], dict[str, float]]] = {}
    for m in _LINE.finditer(text):
        inside, _, outside = m.group(2).partition(OUTSIDE)
        out[int(m.group(1))] = ({k: float(v) for k, v in _PAIR.findall(inside)},
                                {k: float(v) for k, v in _PAIR.findall(outside)})
    return out


def spark_outside(query: Any, batch: int | None = None) -> dict[str, float]:
    """Spark's own durations outside `addBatch` of batch `batch` ({} when its progress is not at
    hand), or of the query's last completed batch when `batch` is None. Read after an epoch's
    `foreachBatch` returned, the last progress may already be that epoch's: the epoch's tail
    (spark_jobs.epoch_tail) asks for the batch before by id."""
    try:
        if query is None:
            return {}
        progress = query.lastProgress
        if batch is not None and progress and _field(progress, "batchId") != batch:
            progress = next((p for p in reversed(query.recentProgress or []) if _field(p, "batchId") == batch), None)
    except Exception:  # a progress we cannot read only costs the log line its second half
        return {}
    if not progress:
        return {}
    d = _field(progress, "durationMs")
    return {k: float(d[k]) for k in SPARK_OUTSIDE if k in d}


def _field(progress: Any, name: str) -> Any:
    """A field of a progress: a dict (pyspark's JSON) or a StreamingQueryProgress."""
    return progress[name] if isinstance(progress, dict) else getattr(progress, name)
