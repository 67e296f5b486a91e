"""`JobStore`: the metrics store bound to one DB, job and operator.

Callers that work on one operator (the controller's stages, the bench, the demo, tests) hold one
of these instead of passing (url, job, operator) to every call. Each method is one short
transaction of the concern module it delegates to; the data plane's epoch commit is not here,
it keeps its single ordered transaction in ballast.store.writer.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import Engine

from ballast.store import (
    console,
    decisions,
    event_log,
    maps,
    metrics,
    plans,
    retention,
    step_checkpoints,
    step_log,
    writer,
)


@dataclass(frozen=True)
class JobStore:
    """Reads and writes of one (job, operator) in the metrics DB at `url`."""

    url: str
    job: str
    operator: str

    @classmethod
    def bind(cls, db: str | Engine, job: str, operator: str) -> JobStore:
        """Bind to a DB url, or to an engine's url (the store keeps its own pooled engine per url)."""
        url = db if isinstance(db, str) else db.url.render_as_string(hide_password=False)
        return cls(url, job, operator)

    # maps and heartbeat
    def latest_map(self) -> maps.MapSnapshot | None:
        return maps.latest_map(self.url, self.job, self.operator)

    def map_at(self, map_version: int) -> maps.MapSnapshot | None:
        return maps.map_at(self.url, self.job, self.operator, map_version)

    def heartbeat(self) -> maps.HeartbeatRow | None:
        return maps.heartbeat(self.url, self.job, self.operator)

    def job_config(self) -> dict[str, Any] | None:
        """The job row's config, written by the job at its start (its run configuration, its operator's
        declared `window`); None before the job's first start."""
        return writer.job_row_config(self.url, self.job, self.operator)

    def executors(self) -> int | None:
        """Executors the job holds now, as its last heartbeat says (None: no heartbeat or not a cluster)."""
        hb = self.heartbeat()
        return None if hb is None else hb.executors

    # per-epoch metrics
    def epoch_window(self, last: int) -> list[metrics.EpochRow]:
        return metrics.epoch_window(self.url, self.job, self.operator, last)

    def epoch_metrics(self, since_epoch: int = 0) -> list[metrics.EpochRow]:
        return metrics.epoch_rows(self.url, self.job, self.operator, since_epoch)

    def worker_window(self, epochs: Iterable[int]) -> list[metrics.WorkerRow]:
        return metrics.worker_window(self.url, self.job, self.operator, epochs)

    def worker_metrics(self, since_epoch: int = 0) -> list[metrics.WorkerRow]:
        return metrics.worker_rows(self.url, self.job, self.operator, since_epoch)

    def bin_stats(self, bins: int, last_epochs: int) -> metrics.BinStats:
        """Over the window, but never before the current bin count came into force (a split)."""
        since = maps.bins_in_force_since(self.url, self.job, self.operator)
        return metrics.bin_stats(self.url, self.job, self.operator, bins, last_epochs, since)

    # step log and step checkpoints
    def first_step_decision_epoch(self, plan_id: str, action: str = "queue") -> int | None:
        return step_log.first_decision_epoch(self.url, self.job, self.operator, plan_id, action)

    def checkpoints(self, plan_id: str) -> dict[int, step_checkpoints.CheckpointRow]:
        return step_checkpoints.checkpoints(self.url, plan_id)

    def settings(self) -> tuple[int | None, int | None]:
        """The trigger interval and records-per-epoch cap in force (step_checkpoints.job_settings)."""
        return step_checkpoints.job_settings(self.url, self.job, self.operator)

    def recent_checkpoints(self, limit: int = 200) -> list[step_checkpoints.CheckpointRow]:
        return step_checkpoints.recent_checkpoints(self.url, self.job, self.operator, limit)

    # DS2's decisions
    def save_decision(self, *, current_workers: int, proposed_workers: int, target_workers: int, action: str,
                      reason: str, inputs: dict[str, Any], plan_id: str | None = None,
                      at: datetime | None = None) -> int:
        return decisions.save_decision(
            self.url, self.job, self.operator, current_workers=current_workers, proposed_workers=proposed_workers,
            target_workers=target_workers, action=action, reason=reason, inputs=inputs, plan_id=plan_id, at=at)

    def latest_decision(self) -> decisions.DecisionRecord | None:
        return decisions.latest_decision(self.url, self.job, self.operator)

    # events
    def add_event(self, level: str, kind: str, message: str, epoch: int | None = None,
                  details: dict[str, Any] | None = None) -> bool:
        return event_log.add_event(self.url, self.job, self.operator, level, kind, message, epoch, details)

    def events(self, kind: str | None = None, limit: int = 50) -> list[event_log.EventRow]:
        return event_log.events(self.url, self.job, self.operator, kind, limit)

    # plans
    def get_plan(self, plan_id: str) -> plans.PlanRecord | None:
        return plans.get_plan(self.url, plan_id)

    def latest_plan(self) -> plans.PlanRecord | None:
        return plans.latest_plan(self.url, self.job, self.operator)

    def open_plans(self) -> list[plans.PlanRecord]:
        return plans.open_plans(self.url, self.job, self.operator)

    def last_finished_plan(self) -> plans.PlanRecord | None:
        return plans.last_finished_plan(self.url, self.job, self.operator)

    # console and retention
    def latest_epoch(self) -> int | None:
        return console.latest_epoch(self.url, self.job, self.operator)

    def prune(self, keep: timedelta = retention.DEFAULT_KEEP,
              keep_epochs: int = retention.DEFAULT_KEEP_EPOCHS) -> retention.Pruned:
        return retention.prune_job(self.url, self.job, self.operator, keep, keep_epochs)
