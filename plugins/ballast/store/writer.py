"""Everything the data plane writes to the metrics DB, idempotent per epoch (was spark_jobs/metrics.py).

The epoch commit (spark_jobs/epoch_commit.py) opens ONE transaction with `epoch_transaction` and
calls the `Session`-taking writers below in its fixed order (map, checkpoints/events, metrics,
heartbeat): the checkpoint and the metrics of an epoch land together or not at all, which is
what exactly-once rests on (docs/dataplane.md, "Commit"). Given the driver's `Fence`, a write
first checks the driver's token in its own transaction (ballast.store.fencing): a stale driver's
transaction is refused whole.

A replayed epoch rewrites its own rows: per-epoch metric rows are replaced (delete + insert in
one transaction, portable across SQLite and Postgres), routing maps, checkpoints and events are
insert-if-absent (a checkpoint is written exactly once per (plan, step)), the heartbeat is merged.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from ballast.errors import BallastError
from ballast.store.fencing import Fence, check_token
from migrations_db import models as m
from migrations_db.db import session_scope


class BinsMismatch(BallastError, RuntimeError):
    """A job restarted with another bin count than its metrics DB records."""


@contextmanager
def epoch_transaction(url: str, fence: Fence | None = None, what: str = "the epoch's commit") -> Iterator[Session]:
    """The epoch's one transaction: committed on exit, rolled back on any error. With `fence`,
    its first statement checks the driver's token (`Fenced` when a newer driver took over)."""
    with session_scope(url) as s:
        if fence is not None:
            check_token(s, fence, datetime.now(UTC), what)
        yield s


def existing_checkpoint(s: Session, job: str, operator: str, plan_id: str, step: int) -> m.StepCheckpoint | None:
    """The (plan, step)'s one checkpoint row, if written (a re-sent step is acked from it)."""
    return s.get(m.StepCheckpoint, (job, operator, plan_id, step))


def job_row_config(url: str, job: str, operator: str) -> dict[str, Any] | None:
    """The job row's config (None: no row yet), what a start compares with its own binding."""
    with session_scope(url) as s:
        row = s.get(m.Job, (job, operator))
        return dict(row.config or {}) if row is not None else None


def ensure_job_row(url: str, job: str, operator: str, bins: int, config: dict[str, Any], now: datetime) -> None:
    with session_scope(url) as s:
        row = s.get(m.Job, (job, operator))
        if row is None:
            s.add(m.Job(job=job, operator=operator, bins=bins, created_at=now, config=config))
        elif row.bins != bins:
            raise BinsMismatch(f"metrics DB has job {job}/{operator} with {row.bins} bins, this start has {bins}: "
                               f"start it with --bins {row.bins}, or under a new job name (B is fixed for a job)")
        else:
            row.config = config


def write_step_decisions(url: str, job: str, operator: str, epoch: int, entries: list[Any],
                         fence: Fence | None = None) -> None:
    with epoch_transaction(url, fence, f"the decision log of epoch {epoch}") as s:
        s.execute(delete(m.StepDecision).where(
            m.StepDecision.job == job, m.StepDecision.operator == operator, m.StepDecision.epoch == epoch))
        for e in entries:
            s.add(m.StepDecision(
                job=job, operator=operator, epoch=epoch, seq=e.seq, plan_id=e.plan_id, step=e.step,
                action=e.action, reason=e.reason, payload={"offset": e.offset, "job": e.job, "operator": e.operator,
                                                           "map_version_after": e.map_version_after,
                                                           **({"handover": e.handover} if e.handover else {})},
            ))


def ensure_routing_map(s: Session, job: str, operator: str, version: int, epoch: int, workers: int,
                       assignment: list[int], now: datetime, plan_id: str | None, step: int | None) -> None:
    if s.get(m.RoutingMap, (job, operator, version)) is None:
        s.add(m.RoutingMap(job=job, operator=operator, map_version=version, epoch=epoch, workers=workers,
                           assignment=list(assignment), created_at=now, plan_id=plan_id, step=step))


def insert_checkpoint_once(s: Session, row: m.StepCheckpoint) -> bool:
    """True when written now; False when the (plan, step) already has its one row."""
    if s.get(m.StepCheckpoint, (row.job, row.operator, row.plan_id, row.step)) is not None:
        return False
    s.add(row)
    return True


def insert_event_once(s: Session, ev: m.Event) -> None:
    exists = s.execute(select(m.Event.id).where(
        m.Event.job == ev.job, m.Event.operator == ev.operator, m.Event.kind == ev.kind,
        m.Event.epoch == ev.epoch, m.Event.message == ev.message)).first()
    if exists is None:
        s.add(ev)


def replace_epoch_metrics(s: Session, job: str, operator: str, epoch: int, epoch_row: m.EpochMetrics,
                          workers: list[m.WorkerMetrics], bins: list[dict[str, Any]]) -> None:
    """`bins` are plain row dicts, inserted as one executemany: with B=4096 an epoch touches
    thousands of bins, and ORM objects cost ~0.3 s per epoch there (Core: a few tens of ms)."""
    for model in (m.EpochMetrics, m.WorkerMetrics, m.BinMetrics):
        s.execute(delete(model).where(model.job == job, model.operator == operator, model.epoch == epoch))
    s.flush()
    s.add(epoch_row)
    s.add_all(workers)
    if bins:
        s.execute(insert(m.BinMetrics), bins)


def heartbeat(s: Session, job: str, operator: str, *, epoch: int, map_version: int, workers: int,
              now: datetime, started_at: datetime, status: str, executors: int | None = None,
              capacity: int | None = None, spark_ui_url: str | None = None) -> None:
    row = s.get(m.Heartbeat, (job, operator))
    if row is None:
        row = m.Heartbeat(job=job, operator=operator, started_at=started_at)
        s.add(row)
    row.last_epoch, row.map_version, row.workers = epoch, map_version, workers
    row.updated_at, row.started_at, row.status = now, started_at, status
    row.pid, row.host = os.getpid(), socket.gethostname()
    row.executors, row.capacity = executors, capacity
    row.spark_ui_url = spark_ui_url[:300] if spark_ui_url else None


def set_status(url: str, job: str, operator: str, status: str, now: datetime, fence: Fence | None = None) -> None:
    """A stale driver (`fence` refused) must not mark the newer driver's heartbeat stopped."""
    with epoch_transaction(url, fence, f"the status {status!r}") as s:
        row = s.get(m.Heartbeat, (job, operator))
        if row is not None:
            row.status, row.updated_at = status, now
