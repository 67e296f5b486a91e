"""Seeding through the store's own writer: what the data plane's epoch commit writes, in its order."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ballast.store import writer
from ballast.store.fencing import Fence
from migrations_db import models as m

JOB, OP, BINS = "clicks", "keycount", 8
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Entry:
    """One step decision as spark_jobs.control logs it (the fields the writer reads)."""

    seq: int
    plan_id: str
    step: int
    action: str
    reason: str = ""
    offset: str = "0:0"
    job: str = JOB
    operator: str = OP
    map_version_after: int | None = None
    handover: dict | None = None


def commit_epoch(url: str, epoch: int, *, workers: int = 2, map_version: int = 0, records: int = 10,
                 state_bytes: int = 100, checkpoint: m.StepCheckpoint | None = None,
                 event: str | None = None, executors: int | None = None, fence: Fence | None = None) -> None:
    """One epoch's commit: map, checkpoint/event, metrics, heartbeat, in one transaction (checking
    the driver token `fence` first, as the data plane does)."""
    at = T0 + timedelta(seconds=epoch)
    assignment = [b * workers // BINS for b in range(BINS)]
    with writer.epoch_transaction(url, fence) as s:
        writer.ensure_routing_map(s, JOB, OP, map_version, epoch, workers, assignment, at, None, None)
        if checkpoint is not None:
            writer.insert_checkpoint_once(s, checkpoint)
        if event is not None:
            writer.insert_event_once(s, m.Event(job=JOB, operator=OP, at=at, level="warning",
                                                kind="control_rejected", message=event, epoch=epoch, details={}))
        erow = m.EpochMetrics(job=JOB, operator=OP, epoch=epoch, map_version=map_version, workers=workers,
                              input_rows=records * BINS, batch_ms=100.0, input_rate=50.0, backlog=0,
                              started_at=at, ended_at=at + timedelta(milliseconds=100))
        wrows = [m.WorkerMetrics(job=JOB, operator=OP, epoch=epoch, worker=w, records_in=records * BINS // workers,
                                 records_out=1, useful_ms=10.0, wall_ms=20.0, state_keys=1, state_bytes=state_bytes)
                 for w in range(workers)]
        brows = [{"job": JOB, "operator": OP, "epoch": epoch, "bin": b, "worker": assignment[b],
                  "records": records, "state_keys": 1, "state_bytes": state_bytes} for b in range(BINS)]
        writer.replace_epoch_metrics(s, JOB, OP, epoch, erow, wrows, brows)
        writer.heartbeat(s, JOB, OP, epoch=epoch, map_version=map_version, workers=workers, now=at,
                         started_at=T0, status="running", executors=executors)


def applied(plan_id: str, step: int, epoch: int) -> m.StepCheckpoint:
    return m.StepCheckpoint(job=JOB, operator=OP, plan_id=plan_id, step=step, status="applied",
                            applied_epoch=epoch, applied_at=T0, completed_at=T0 + timedelta(seconds=epoch),
                            bins_moved=2, keys_moved=3, bytes_moved=4, migration_ms=5.0, map_version_after=1,
                            reason="")
