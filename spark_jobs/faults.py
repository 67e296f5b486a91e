"""Crash injection for the exactly-once tests: kill this process at a named point, once.

`BALLAST_FAULTS_FILE` names a file of lines `<point> <n>`: the n-th time (counted per process)
that point is reached, the line is removed from the file (so a restarted job runs on) and the
process SIGKILLs itself. Points (docs/dataplane.md "Crash injection"): in the driver
after_decision, after_apply, before_manifest, in_step_commit (inside the epoch's DB transaction,
before it commits, of an epoch that answers a control step), before_acks; in a Spark Python worker
worker_mid_move, worker_prepared, worker_before_commit; in an executor's JVM (the transactional
writer, io.ballast.sink.Faults: the same file and rules, so both sides take POSIX locks on it)
worker_before_output_commit (the task's Kafka transaction holds its records, not committed) and
worker_after_output_commit (committed, the task not yet returned: spark_jobs.txn_output);
relocate_copied (spark_jobs.relocate, after each file copied). Unset: no-op.

A line `<point> <n> stop` SIGSTOPs the process instead (it goes on where it stopped after a
SIGCONT): how the zombie-executor test freezes an executor at an exact point of its task
before it freezes the rest of the host — a stop from outside at a random moment could not say
where the task was. While `<file>.hold` exists, a process that stopped at a point stays at it after
it runs again (the JVM's self-stop was seen to take hold only after its task had gone on and
committed: the test stops it from outside too, and removes the file when the task may go on).
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from ballast.options import settings

_counts: dict[str, int] = {}
_paused = False


@contextmanager
def paused() -> Iterator[None]:
    """No point counts or fires inside (the warm-up runs a worker's epoch on scratch state)."""
    global _paused
    before, _paused = _paused, True
    try:
        yield
    finally:
        _paused = before


def hit(point: str) -> None:
    if _paused:
        return
    opts = settings()
    path = opts.faults_file
    if path is None or not path.exists():
        return
    _counts[point] = _counts.get(point, 0) + 1
    stop = False
    with open(path, "r+") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)  # POSIX locks: the JVM's writer (io.ballast.sink.Faults) takes the same
        lines = [ln.split() for ln in f.read().splitlines() if ln.strip()]
        for i, parts in enumerate(lines):
            if parts[0] == point and int(parts[1]) <= _counts[point]:
                del lines[i]
                f.seek(0)
                f.truncate()
                f.write("".join(" ".join(p) + "\n" for p in lines))
                f.flush()
                os.fsync(f.fileno())
                if parts[2:] == ["stop"]:
                    stop = True
                    break
                print(f"[ballast-fault] killing pid {os.getpid()} at {point}", flush=True)
                if opts.faults_kill_group:
                    os.killpg(os.getpgrp(), signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)
    if stop:  # after the file's lock is released: the other processes' points must not wait on it
        print(f"[ballast-fault] stopping pid {os.getpid()} at {point}", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # returns after a SIGCONT
        hold = path.with_name(path.name + ".hold")
        while hold.exists():  # a stop's hold (module docstring): the point's next step waits for the test
            time.sleep(0.02)
