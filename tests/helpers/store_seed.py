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


# a handover's event times in the seeds: a sliding 10 s window every 5 s, migration 12:00:05 UTC
NOON_MS = int(datetime(2026, 1, 1, 12, tzinfo=UTC).timestamp() * 1000)
HANDOVER_MOVES = ((3, 0, 1), (5, 0, 1), (9, 0, 1), (12, 0, 1))


def handover_progress(since: int, watermark: int | None, moves: tuple[tuple[int, int, int], ...] = HANDOVER_MOVES,
                      slide: int = 5_000, length: int = 10_000) -> dict:
    """A waiting handover's progress as spark_jobs.control_handover.progress logs it (migration
    12:00:05.000, activation :10, boundary :15 UTC; windows left: their ends in (watermark, boundary])."""
    migration = NOON_MS + 5_000
    boundary = migration + length
    left = None if watermark is None else max(0, -(-(boundary - watermark) // slide))
    return {"since": since, "migration": migration, "activation": migration + slide, "boundary": boundary,
            "moves": [list(mv) for mv in moves], "watermark": watermark, "windows_left": left}


def log_waiting_handover(url: str, plan_id: str, step: int, epochs: list[int], watermarks: list[int | None], *,
                         job: str = JOB, operator: str = OP,
                         moves: tuple[tuple[int, int, int], ...] = HANDOVER_MOVES) -> None:
    """The decision log of a handover step waiting at `epochs` (the watermark its timers ran at before each)."""
    for e, wm in zip(epochs, watermarks, strict=True):
        p = handover_progress(epochs[0], wm, moves)
        at = "not known yet" if wm is None else f"{wm} ms"
        why = (f"handover: both owners get the bins' rows since epoch {epochs[0]}; the old owner finishes the windows "
               f"up to {p['boundary']} ms (migration {p['migration']} ms, the new owner's windows from "
               f"{p['activation']} ms); the watermark is at {at}")
        writer.write_step_decisions(url, job, operator, e, [Entry(0, plan_id, step, "queue", why, job=job,
                                                                  operator=operator, handover=p)])


def handover_applied(url: str, plan_id: str, step: int, epoch: int, *, job: str = JOB, operator: str = OP,
                     bins: int = len(HANDOVER_MOVES)) -> None:
    """The epoch that applies a handover step: its decision and its checkpoint (0 keys, 0 bytes)."""
    boundary = NOON_MS + 15_000
    why = (f"handover complete: the old owner's last window ended at {boundary} ms and the timers ran at "
           f"watermark {boundary + 700} ms; 0 bytes of state moved")
    writer.write_step_decisions(url, job, operator, epoch, [Entry(0, plan_id, step, "apply", why, job=job,
                                                                  operator=operator)])
    now = datetime.now(UTC)
    with writer.epoch_transaction(url) as s:
        writer.insert_checkpoint_once(s, m.StepCheckpoint(
            job=job, operator=operator, plan_id=plan_id, step=step, status="applied", applied_epoch=epoch,
            applied_at=now, completed_at=now, bins_moved=bins, keys_moved=0,
            bytes_moved=0, migration_ms=3.0, map_version_after=1, reason=f"test handover; {why}"))
