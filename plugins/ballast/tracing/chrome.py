"""A trace as Chrome trace-event JSON, which Perfetto's UI, speedscope and chrome://tracing open.

Why this format: it is the one every profiler viewer reads, so an operator can look at a slow
window of a job with a tool they know. Each timeline is a thread of one process (the job);
each activity a complete event (`ph: "X"`) whose args carry its epoch, label and critical
participation; each message a flow arrow (`ph: "s"` on the sender's activity, `ph: "f"` on the
receiver's). Times are microseconds, as the format wants.
"""

from __future__ import annotations

from typing import Any

from ballast.tracing.cp import Participation
from ballast.tracing.graph import Trace


def chrome_trace(trace: Trace, job: str, cp: Participation | None = None) -> dict[str, Any]:
    """The JSON object (`{"traceEvents": [...], "displayTimeUnit": "ms"}`) of `trace`."""
    tids = {tl: i + 1 for i, tl in enumerate(sorted(trace.timelines(), key=_timeline_order))}
    share: dict[int, float] = {}
    if cp is not None:
        for e, v in cp.edges:
            if e.activity is not None:
                share[e.activity] = share.get(e.activity, 0.0) + v
    events: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                                     "args": {"name": f"ballast job {job}"}}]
    for tl, tid in tids.items():
        events.append({"ph": "M", "name": "thread_name", "pid": 1, "tid": tid, "args": {"name": tl}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 1, "tid": tid, "args": {"sort_index": tid}})
    for i, a in enumerate(trace.activities):
        args: dict[str, Any] = {}
        if a.epoch is not None:
            args["epoch"] = a.epoch
        if a.label:
            args["label"] = a.label
        if cp is not None:
            args["critical_participation"] = round(share.get(i, 0.0), 6)
        events.append({"ph": "X", "name": a.kind, "cat": "critical" if share.get(i, 0.0) > 0 else a.kind,
                       "pid": 1, "tid": tids[a.timeline], "ts": a.start_us, "dur": a.end_us - a.start_us,
                       "args": args})
    for n, m in enumerate(trace.messages):
        src, dst = trace.activities[m.src], trace.activities[m.dst]
        events.append({"ph": "s", "id": n + 1, "name": m.kind, "cat": "message", "pid": 1,
                       "tid": tids[src.timeline], "ts": src.end_us})
        events.append({"ph": "f", "bp": "e", "id": n + 1, "name": m.kind, "cat": "message", "pid": 1,
                       "tid": tids[dst.timeline], "ts": dst.start_us})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _timeline_order(tl: str) -> tuple[int, int, str]:
    """The driver first, then workers by number, then the rest by name."""
    if tl == "driver":
        return (0, 0, tl)
    head, _, num = tl.rpartition(" ")
    if head == "worker" and num.isdigit():
        return (1, int(num), tl)
    return (2, 0, tl)
