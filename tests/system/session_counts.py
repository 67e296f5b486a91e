"""A session-window processor that declares its windows, for the session handover tests
(tests/system/test_handover_sessions_job.py, tests/spark_jobs/test_handover_sessions.py;
docs/handover.md, "Session windows: the rule").

`SessionCounts`: per user, sessions of event time with a gap of GAP_MS (a row joins a session when it
lies less than a gap from one of its rows; a row that bridges two sessions merges them), 5 s of
lateness, the input schema of examples/operators/window_counts.py. A session's (last row, count,
total) lives in a MapState keyed by its start; an event-time timer at its last row + GAP_MS emits
Row(user, window_start = the session's start, count, total) and clears it: a session's results come
from its timer at its last row + gap, as a handover of session windows needs.

Spark loads the class by module name: ship this file and window_counts.py with addPyFile.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyspark.sql import Row

from ballast.policy.handover import WindowSpec
from spark_jobs.processor import StatefulProcessor, query

try:
    import window_counts as wc
except ImportError:  # not shipped and not on the path yet: the example beside the repo's tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "operators"))
    import window_counts as wc

GAP_MS = 1_000
LATENESS_MS = 5_000


class SessionCountsProcessor(StatefulProcessor):
    def init(self, handle: Any) -> None:
        self.handle = handle
        self.sessions = handle.getMapState("sessions", "start long", "last long, count long, total long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        for row in rows:
            ms = int(row.ts.timestamp() * 1000)
            start, last, count, total = ms, ms, 1, int(row.amount)
            for (s,), (e, c, t) in list(self.sessions.iterator()):
                if s - GAP_MS < ms < e + GAP_MS:  # within a gap of the session: joins (maybe merges) it
                    start, last, count, total = min(start, s), max(last, e), count + c, total + t
                    self.sessions.removeKey((s,))
                    self.handle.deleteTimer(e + GAP_MS)
            self.sessions.updateValue((start,), (last, count, total))
            self.handle.registerTimer(last + GAP_MS)
        return iter([])

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        ts = expiredTimerInfo.getExpiryTimeInMs()
        for (s,), (e, c, t) in list(self.sessions.iterator()):
            if e + GAP_MS == ts:
                self.sessions.removeKey((s,))
                yield Row(user=key[0], window_start=s, count=c, total=t)

    def close(self) -> None:
        pass


SessionCounts = query(SessionCountsProcessor, input_schema=wc.INPUT_SCHEMA, grouping_keys=("user",),
                      time_mode="EventTime", event_time_column="ts", lateness_ms=LATENESS_MS,
                      window=WindowSpec(0, gap_ms=GAP_MS))


def session_reference(evs: list[dict[str, Any]], gap_ms: int = GAP_MS) -> list[tuple[str, int, int, int]]:
    """Every (user, session start, count, total) of the events (none late), each once, sorted."""
    by_user: dict[str, list[tuple[int, int]]] = {}
    for e in evs:
        by_user.setdefault(e["user"], []).append((e["ms"], e["amount"]))
    out = []
    for user, rows in by_user.items():
        cur: list[int] | None = None  # start, last, count, total
        for ms, amount in sorted(rows):
            if cur is not None and ms < cur[1] + gap_ms:
                cur[1], cur[2], cur[3] = ms, cur[2] + 1, cur[3] + amount
                continue
            if cur is not None:
                out.append((user, cur[0], cur[2], cur[3]))
            cur = [ms, ms, 1, amount]
        if cur is not None:
            out.append((user, cur[0], cur[2], cur[3]))
    return sorted(out)
