"""An epoch's tail: the driver's work after its commit and acks that nothing of the epoch waits for.

Spark commits an epoch's offsets once `foreachBatch` returns, and starts planning the next epoch
then. What the runner does after the DB commit and the acks — pruning the journal's old decisions,
clocks and hand-off files (a directory listing and deletes, an object store's LIST on s3), the
epoch's log lines, the rebalance signal, the epoch's critical path and its stored trace — changes
nothing a replay or a restart reads, so it runs on one helper thread while Spark plans and reads
the next epoch.

Safe because (docs/dataplane.md, 'One epoch', step 6):
- it starts after the commit and the acks, so the checkpoint order (decision, apply, commit, acks,
  then Spark's offset commit) is the same as when it ran inline;
- the next epoch joins it before its own first step, so two tails never overlap and an epoch reads
  what the tail before it left;
- a failure in it is logged and never the epoch's: a decision file left behind is pruned by the next
  tail, a lost log line or signal is only that;
- a crash while it runs loses only what it would have done: the journal keeps more than it needs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from spark_jobs.epoch_commit import EpochCommit, EpochReport
from spark_jobs.epoch_times import EpochTimes, spark_outside
from spark_jobs.epoch_trace import critical_path_text, epoch_critical_path
from spark_jobs.inputs import InputRows
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import KEEP_EPOCHS, Journal
from spark_jobs.rebalance_signals import RebalanceSignals
from spark_jobs.run_config import RunConfig
from spark_jobs.timers import ClockLog

log = logging.getLogger("ballast.runner")


class EpochTail:
    """Runs one epoch's tail at a time on a helper thread; `join()` waits for the running one."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self.waited_ms = 0.0  # how long the last join waited: a tail that outlasts Spark's planning shows here

    def start(self, epoch: int, work: Callable[[], None]) -> None:
        """Run `work` after the previous tail has ended (joins it first, so tails run in epoch order)."""
        self.join()

        def run() -> None:
            try:
                work()
            except Exception:  # the epoch is committed: its tail's failure is only logged
                log.exception("epoch %d: the work after its commit failed (the epoch stays committed)", epoch)

        self._thread = threading.Thread(target=run, name=f"ballast-tail-{epoch}", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the running tail; False when it still runs after `timeout_s`."""
        t = self._thread
        if t is None:
            self.waited_ms = 0.0
            return True
        t0 = time.perf_counter()
        t.join(timeout_s)
        self.waited_ms = (time.perf_counter() - t0) * 1000
        if t.is_alive():
            return False
        self._thread = None
        return True


@dataclass
class AfterCommit:
    """The tail's work (what `EpochTail.start` runs for a committed epoch): prune the journal, log,
    signal, find the critical path and store the trace. A component of `spark_jobs.runner.JobRunner`,
    handed the runner's components; `query` gives the streaming query in force (a settings step
    replaces it)."""

    cfg: RunConfig
    journal: Journal
    clocks: ClockLog | None
    inputs: InputRows
    committer: EpochCommit
    signals: RebalanceSignals
    clients: JobClients
    query: Callable[[], Any]

    def __call__(self, report: EpochReport, times: EpochTimes) -> None:
        epoch = report.epoch
        self.journal.gc(epoch)
        if self.clocks is not None:
            self.clocks.gc(epoch - KEEP_EPOCHS)
        self.inputs.gc(epoch - KEEP_EPOCHS)
        self.committer.log_epoch(report)
        self.signals.after_commit(epoch, report.backlog, report.batch_ms, report.decision.state_after.workers)
        log.info("epoch %d time ms: %s", epoch, times.text(spark_outside(self.query(), batch=epoch - 1)))
        found = epoch_critical_path(epoch, times.spans, report.workers) if self.cfg.trace else None  # docs/tracing.md
        if found is not None:  # whole now that the commit and acks are done; its own transaction
            self.clients.db("the epoch's trace", self.committer.store_trace, epoch, found[0])
        cp = found[1] if found is not None else None
        if cp is not None and cp.length_us:
            log.info("epoch %d critical path %.0f ms: %s", epoch, cp.length_us / 1000, critical_path_text(cp))
