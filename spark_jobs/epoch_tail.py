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
