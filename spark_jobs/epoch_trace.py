"""The trace of one epoch (`ballast.tracing`), built from what the epoch measures anyway: the
driver's phases (spark_jobs.epoch_times) and each task's phases (`spans` in its metrics,
spark_jobs.worker), both on the wall clock. Its critical participation says what held the epoch
back, one log line per epoch.

The epoch as a program activity graph:
- the driver's timeline: its phases in order (control, decide, plan, then, after the tasks,
  manifest, backlog, db, acks); while the tasks run it waits;
- each worker's timeline: read (the shuffle read of its rows), prepare (bins brought up to date:
  moves, pre-copies, catch-up), fold;
- a `source stage` message from the driver's plan to each task's read: Spark's first stage (the
  Kafka read, the operator's JVM expressions, the shuffle write) and the task's launch;
- a `task end` message from the task that finished last into `job end`, the driver's activity from
  then to the end of the Spark job (the tasks' tails: state object, cache commit, outputs; then
  Spark's job end). The driver waits for the last task only, so an early task's path ends at its
  fold and is never critical.
"""

from __future__ import annotations

import logging
from typing import Any

from ballast.tracing import Activity, Message, Participation, Trace, critical_participation, snapshot

log = logging.getLogger("ballast.runner")

DRIVER = "driver"
SPARK_PHASE = "spark"  # the driver's lap around the Spark job (spark_jobs.epoch_apply)


def epoch_trace(epoch: int, spans: list[tuple[str, int, int]], docs: list[dict[str, Any]] | None) -> Trace:
    """The epoch's activities and messages (module docstring); `spans`: EpochTimes.spans."""
    acts: list[Activity] = []
    msgs: list[Message] = []
    tasks = [(int(d["worker"]), d["spans"]) for d in (docs or []) if d.get("spans")]
    plan_i: int | None = None
    for phase, start, end in spans:
        if phase != SPARK_PHASE or not tasks:
            acts.append(Activity(DRIVER, phase, start, end, epoch))
            plan_i = len(acts) - 1
            continue
        firsts, last_end, last_i = [], start, None
        for w, task_spans in tasks:
            for j, (kind, s, e) in enumerate(task_spans):
                acts.append(Activity(f"worker {w}", kind, int(s), int(e), epoch))
                if j == 0:
                    firsts.append(len(acts) - 1)
            if acts[-1].end_us >= last_end:
                last_end, last_i = acts[-1].end_us, len(acts) - 1
        if plan_i is not None:
            msgs += [Message(plan_i, i, "source stage") for i in firsts if acts[i].start_us >= acts[plan_i].end_us]
        tail_start = min(max(last_end, start), end)
        acts.append(Activity(DRIVER, "job end", tail_start, end, epoch))
        if last_i is not None:
            msgs.append(Message(last_i, len(acts) - 1, "task end"))
        plan_i = len(acts) - 1
    return Trace(tuple(acts), tuple(msgs))


def epoch_critical_path(epoch: int, spans: list[tuple[str, int, int]],
                        docs: list[dict[str, Any]] | None) -> tuple[Trace, Participation] | None:
    """The epoch's trace and its CP; None when the clocks disagree so much that the spans are not one
    trace (overlapping phases, a message back in time): logged at DEBUG, never raised — a trace
    must not fail an epoch."""
    try:
        trace = epoch_trace(epoch, spans, docs)
        return trace, critical_participation(snapshot(trace))
    except ValueError as exc:
        log.debug("epoch %d: no trace (%s)", epoch, exc)
        return None


def epoch_participation(epoch: int, spans: list[tuple[str, int, int]],
                        docs: list[dict[str, Any]] | None) -> Participation | None:
    """CP of the epoch's trace; None when there is no trace (`epoch_critical_path`)."""
    found = epoch_critical_path(epoch, spans, docs)
    return found[1] if found is not None else None


def critical_path_text(cp: Participation, top: int = 3) -> str:
    """`fold on worker 1 73%, source stage 12%, ...`: the largest shares (messages by their kind)."""
    return ", ".join(f"{k} {v:.0%}" for k, v in list(cp.by("label").items())[:top])
