"""The driver's side of "one driver at a time": its fencing token and the checks around it.

A component of `spark_jobs.runner.JobRunner`. The start takes a new token (ballast.store.fencing)
before the first epoch; the epoch commit and the decision log check it in their own transaction
(ballast.store.writer); here are the checks before the driver's destructive actions on the
durable state (the manifest, retention), and the diagnosis of a failure: a driver that lost its
token exits with `Fenced` (exit code `FENCED_EXIT`), whatever Spark or the state said first — a
newer driver's retention removing what this one needed is not a damaged state.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ballast.options import settings
from ballast.protocol import utcnow
from ballast.store import fencing
from spark_jobs.durable import DurableState, StateGap
from spark_jobs.job_clients import JobClients
from spark_jobs.run_config import RunConfig
from spark_jobs.storage import object_store_uri

log = logging.getLogger("ballast.runner")

#: exit code of a driver stopped because a newer driver of its job took over (1: the query failed)
FENCED_EXIT = 3


class DriverFence:
    """The runner's token: taken at start, checked before durable-state actions, asked on failure."""

    def __init__(self, cfg: RunConfig, clients: JobClients, stopping: threading.Event) -> None:
        self.cfg = cfg
        self._clients = clients  # its DB calls retry while the DB is away
        self._stopping = stopping  # set when this driver is fenced: the runner stops
        self.fence: fencing.Fence | None = None  # the token, once taken
        self.fenced: fencing.Fenced | None = None  # why this driver was refused, once it was

    def take(self) -> None:
        """A new token for this start; from now on every older driver of the operator is fenced."""
        cfg = self.cfg
        self.fence = fencing.take_token(cfg.db_url, cfg.job, cfg.operator, utcnow(), outage_s=outage_budget(cfg))
        log.info("driver token %d taken for job %s operator %s: older drivers of it are fenced from now on",
                 self.fence.token, cfg.job, cfg.operator)

    def guard(self, what: str) -> None:
        """Check the token right before a write outside the metrics DB (manifest, retention)."""
        if self.fence is not None:
            self._clients.db(what, fencing.guard, self.cfg.db_url, self.fence, utcnow(), what)

    def commit_manifest(self, durable: DurableState, epoch: int, map_version: int, workers: int,
                         snapshot: bool, handed_over: dict[int, tuple[int, int]] | None = None) -> list[dict[str, Any]]:
        """`DurableState.commit_epoch` behind a token check; a missing object after it (a newer
        driver's retention removed this epoch's objects) is the fencing when the token is gone."""
        self.guard(f"the manifest of epoch {epoch}")
        try:
            return durable.commit_epoch(epoch, map_version, workers, snapshot, handed_over)
        except StateGap as gap:
            fenced = self.lost(f"the manifest of epoch {epoch}")
            if fenced is None:
                raise
            raise fenced from gap

    def lost(self, what: str) -> fencing.Fenced | None:
        """`Fenced` when a newer driver holds the token now (None: still ours, or not known)."""
        if self.fence is None:
            return None
        try:
            fencing.guard(self.cfg.db_url, self.fence, utcnow(), what)
        except fencing.Fenced as exc:
            return exc
        except Exception:  # the DB away: the original failure stands
            log.exception("could not check the driver token after a failure")
        return None

    def failure(self, exc: Any) -> Exception | None:
        """What an ended query raises: `Fenced` when this driver lost its token — whatever failed
        first (Spark's commit log, an object a newer driver's retention removed) — else the
        failure; None for none, or for the batch a requested stop refused (StopRequested)."""
        if self.fenced is None and (exc is None or (self._stopping.is_set() and "StopRequested" in str(exc))):
            return None
        failed = RuntimeError(f"streaming query failed: {exc}")
        fenced = self.fenced or self.lost("its next commit")
        if fenced is not None:
            fenced.__cause__ = failed
            return fenced
        return failed

    def note(self, exc: fencing.Fenced) -> None:
        """Remember it (the query fails with it; `await_termination` raises it) and stop."""
        if self.fenced is None:
            self.fenced = exc
            log.error("%s", exc)
        self._stopping.set()


def outage_budget(cfg: RunConfig) -> float:
    """The longest an epoch of this driver may wait out an outage, which the supervisor adds to the
    heartbeat timeout: the metrics DB's and Kafka's budgets, and the object store's when the state
    lives on one (BALLAST_STORAGE_OUTAGE_S; a file system does not wait)."""
    budgets = [cfg.db_outage_s, cfg.kafka_outage_s]
    if object_store_uri(cfg.state_location):
        budgets.append(settings().storage_outage_s)
    return max(budgets)
