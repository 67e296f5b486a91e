"""The driver's side of event-driven rebalancing: after each committed epoch, feed DS2's inputs to
the signal policy (ballast.policy.signals) and, when they cross a threshold, send one record to
`<job>.signals`, which the rebalance DAG's asset watcher turns into a DAG run at once.

Runs in the epoch's tail (spark_jobs.epoch_tail), off the critical path, and is never the epoch's
failure: the send is asynchronous and a broker that refuses it costs a warning (the schedule still
runs the DAG). Sent after the commit, so a signal describes committed epochs only.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any

from ballast.job_messages import RebalanceSignal
from ballast.policy.signals import EpochLoad, Signal, Signaller
from ballast.protocol import MAX_INT, message_key, signals_topic, utcnow
from spark_jobs.run_config import RunConfig

log = logging.getLogger("ballast.signals")


class RebalanceSignals:
    """One per operator's driver; `clients.producer` is the driver's kafka-python producer (opened
    when the job starts, so looked up at each send)."""

    def __init__(self, cfg: RunConfig, clients: Any) -> None:
        self.cfg = cfg
        self.clients = clients
        self.signaller = Signaller(cfg.signal_config)

    def follow_trigger(self, trigger_ms: int) -> None:
        """The trigger interval in force (a settings step may change it): the epoch budget follows
        it unless the job configured its signals' budget itself."""
        if self.cfg.signal is None:
            self.signaller.cfg = dataclasses.replace(self.signaller.cfg, budget_ms=float(trigger_ms or 1000))

    def after_commit(self, epoch: int, backlog: int | None, batch_ms: float, workers: int) -> Signal | None:
        """Observe a committed epoch; the signal sent for it, if any. An epoch whose backlog is
        unknown (the end-offset query failed) counts as no growth."""
        try:
            load = EpochLoad(epoch, int(backlog or 0), float(batch_ms), int(workers))
            sig = self.signaller.observe(load, time.time())
            if sig is None:
                return None
            job, op = self.cfg.job, self.cfg.operator
            record = RebalanceSignal(job=job, operator=op, epoch=sig.epoch, reason=sig.reason, detail=sig.detail,
                                     backlog=min(sig.backlog, MAX_INT), busy=round(sig.busy, 4), at=utcnow())
            future = self.clients.producer.send(signals_topic(job), key=message_key(job, op), value=record.to_json())
            future.add_errback(lambda exc: log.warning("rebalance signal of epoch %d not sent: %s "
                                                       "(the schedule still runs the DAG)", epoch, exc))
            log.info("epoch %d: rebalance signal (%s): %s", epoch, sig.reason, sig.detail)
            return sig
        except Exception:  # never the epoch's failure
            log.exception("epoch %d: rebalance signal failed", epoch)
            return None
