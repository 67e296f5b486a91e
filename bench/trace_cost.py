"""What the critical-path analysis costs: CP of a 60 s window of epoch traces against one epoch's time.

`python -m bench.trace_cost [--window-s 60] [--trigger-ms 500] [--workers 2,8,64] [--reps 5]`
prints one JSON line per worker count: the window's epochs and activities, the median time to
read its CP (`ballast.tracing.epochs_participation` and the per-label sums the console and the
controller use), and that time over one epoch's (the trigger interval): Snailtrail's goal is to
analyse a window faster than the system produces it, here below one epoch (< 1).

The traces have the shape the data plane records (spark_jobs.epoch_trace): the driver's eight
phases, per worker a read, prepare and fold, a source-stage message to each task and a task-end
message from the last one, with per-worker times drawn from a fixed seed. Why synthetic: the
figure is the analysis's own cost, which depends on the trace's size, not on what ran.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from ballast.tracing import Activity, Message, Trace, epochs_participation

DRIVER_BEFORE = (("control", 2), ("decide", 3), ("plan", 40))
DRIVER_AFTER = (("manifest", 15), ("backlog", 3), ("db", 20), ("acks", 2))


def window_trace(window_s: float, trigger_ms: int, workers: int, seed: int = 7) -> Trace:
    """`window_s` / `trigger_ms` epochs, each with `workers` tasks, started on their trigger (or right
    after the one before when it overran it, as Spark's micro-batches are)."""
    rng = random.Random(seed)
    acts: list[Activity] = []
    msgs: list[Message] = []
    epochs = int(window_s * 1000 / trigger_ms)
    t = 0
    for e in range(epochs):
        t = max(e * trigger_ms * 1000, t)  # on its trigger, or right after an epoch that overran it
        for kind, ms in DRIVER_BEFORE:
            acts.append(Activity("driver", kind, t, t + ms * 1000, e))
            t = acts[-1].end_us
        plan = len(acts) - 1
        last_end, last_i = t, plan
        for w in range(workers):
            s = t + rng.randint(80, 200) * 1000  # the source stage and the task's launch
            for kind, ms in (("read", rng.randint(2, 10)), ("prepare", rng.randint(0, 3)),
                             ("fold", rng.randint(20, 120))):
                acts.append(Activity(f"worker {w}", kind, s, s + ms * 1000, e))
                s = acts[-1].end_us
            msgs.append(Message(plan, len(acts) - 3, "source stage"))
            if s >= last_end:
                last_end, last_i = s, len(acts) - 1
        acts.append(Activity("driver", "job end", last_end, last_end + 30_000, e))
        msgs.append(Message(last_i, len(acts) - 1, "task end"))
        t = acts[-1].end_us
        for kind, ms in DRIVER_AFTER:
            acts.append(Activity("driver", kind, t, t + ms * 1000, e))
            t = acts[-1].end_us
    return Trace(tuple(acts), tuple(msgs))


def time_cp(trace: Trace, reps: int) -> float:
    """Median ms, over `reps`, of the window's CP as the console and the controller read it:
    `epochs_participation` and its per-label sums."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        epochs_participation(trace).by("label")
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def measure(window_s: float, trigger_ms: int, workers: int, reps: int) -> dict[str, float | int]:
    trace = window_trace(window_s, trigger_ms, workers)
    cp_ms = time_cp(trace, reps)
    return {"window_s": window_s, "trigger_ms": trigger_ms, "workers": workers,
            "epochs": len({a.epoch for a in trace.activities}), "activities": len(trace.activities),
            "cp_ms": round(cp_ms, 2), "cp_ms_over_epoch_ms": round(cp_ms / trigger_ms, 4)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.trace_cost", description=__doc__.splitlines()[0])
    ap.add_argument("--window-s", type=float, default=60.0)
    ap.add_argument("--trigger-ms", type=int, default=500)
    ap.add_argument("--workers", default="2,8,64")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    for w in (int(x) for x in a.workers.split(",")):
        print(json.dumps(measure(a.window_s, a.trigger_ms, w, a.reps)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
