"""Typed reads and writes of the metrics DB for the control plane.

Every function opens its own short transaction (`session_scope`) and returns plain dataclasses,
never ORM objects, so callers (controller, emitter, trigger, plugin) can hold results across
sessions and serialise them to XCom. No Airflow import here: this module is used by the
triggerer, by tests and by the DAG tasks alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from ballast.dbtime import as_utc

# plans, steps, owners and step claims live in ballast.plan_store: re-exported (`X as X`) so callers
# keep using `repository.get_plan` & co.
from ballast.plan_store import (
    CLAIM_TIMEOUT_S as CLAIM_TIMEOUT_S,
)
from ballast.plan_store import (
    OPEN_STATUSES as OPEN_STATUSES,
)
from ballast.plan_store import (
    OWNER_LEASE_S as OWNER_LEASE_S,
)
from ballast.plan_store import (
    PlanConflict as PlanConflict,
)
from ballast.plan_store import (
    PlanRecord as PlanRecord,
)
from ballast.plan_store import (
    StepRecord as StepRecord,
)
from ballast.plan_store import (
    claim_step_emission as claim_step_emission,
)
from ballast.plan_store import (
    conflict_message as conflict_message,
)
from ballast.plan_store import (
    current_owner as current_owner,
)
from ballast.plan_store import (
    get_plan as get_plan,
)
from ballast.plan_store import (
    last_finished_plan as last_finished_plan,
)
from ballast.plan_store import (
    mark_step_emitted as mark_step_emitted,
)
from ballast.plan_store import (
    new_claimant as new_claimant,
)
from ballast.plan_store import (
    open_plans as open_plans,
)
from ballast.plan_store import (
    plan_steps as plan_steps,
)
from ballast.plan_store import (
    recent_plans as recent_plans,
)
from ballast.plan_store import (
    release_step_claim as release_step_claim,
)
from ballast.plan_store import (
    save_plan as save_plan,
)
from ballast.plan_store import (
    set_plan_status as set_plan_status,
)
from ballast.plan_store import (
    take_over_plan as take_over_plan,
)
from ballast.plan_store import (
    touch_owner as touch_owner,
)
from ballast.plan_store import (
    what_to_do as what_to_do,
)
from migrations_db import models as m
from migrations_db.db import session_scope

_utc = as_utc


# ----------------------------------------------------------------------------- routing maps


@dataclass(frozen=True)
class MapSnapshot:
    """One version of the bin -> worker map."""

    job: str
    operator: str
    map_version: int
    epoch: int
    workers: int
    assignment: tuple[int, ...]
    plan_id: str | None = None
    step: int | None = None

    @property
    def bins(self) -> int:
        return len(self.assignment)


def latest_map(url: str, job: str, operator: str) -> MapSnapshot | None:
    """The map in force now: the highest map version the job has recorded."""
    with session_scope(url) as s:
        row = s.scalars(
            select(m.RoutingMap)
            .where(m.RoutingMap.job == job, m.RoutingMap.operator == operator)
            .order_by(m.RoutingMap.map_version.desc())
            .limit(1)
        ).first()
        if row is None:
            return None
        return MapSnapshot(job, operator, row.map_version, row.epoch, row.workers,
                           tuple(int(w) for w in row.assignment), row.plan_id, row.step)


# ----------------------------------------------------------------------------- metrics windows


@dataclass(frozen=True)
class EpochRow:
    epoch: int
    map_version: int
    workers: int
    input_rows: int
    batch_ms: float
    migration_ms: float
    input_rate: float | None
    backlog: int | None
    started_at: datetime
    ended_at: datetime


@dataclass(frozen=True)
class WorkerRow:
    epoch: int
    worker: int
    records_in: int
    records_out: int
    useful_ms: float
    wall_ms: float
    state_keys: int
    state_bytes: int


def epoch_window(url: str, job: str, operator: str, last: int) -> list[EpochRow]:
    """The last `last` epochs, oldest first."""
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.EpochMetrics)
            .where(m.EpochMetrics.job == job, m.EpochMetrics.operator == operator)
            .order_by(m.EpochMetrics.epoch.desc())
            .limit(last)
        ).all()
        out = [
            EpochRow(r.epoch, r.map_version, r.workers, r.input_rows, r.batch_ms, r.migration_ms,
                     r.input_rate, r.backlog, _utc(r.started_at), _utc(r.ended_at))  # type: ignore[arg-type]
            for r in rows
        ]
    return sorted(out, key=lambda e: e.epoch)


def worker_window(url: str, job: str, operator: str, epochs: Iterable[int]) -> list[WorkerRow]:
    """Per-worker rows of the given epochs (DS2's per-instance observations)."""
    ids = sorted(set(epochs))
    if not ids:
        return []
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.WorkerMetrics).where(
                m.WorkerMetrics.job == job, m.WorkerMetrics.operator == operator,
                m.WorkerMetrics.epoch >= ids[0], m.WorkerMetrics.epoch <= ids[-1],
            )
        ).all()
        return sorted(
            (WorkerRow(r.epoch, r.worker, r.records_in, r.records_out, r.useful_ms, r.wall_ms,
                       r.state_keys, r.state_bytes) for r in rows if r.epoch in set(ids)),
            key=lambda w: (w.epoch, w.worker),
        )


@dataclass(frozen=True)
class BinStats:
    """Per-bin load (records over the window) and size (latest state bytes/keys seen)."""

    load: tuple[float, ...]
    bytes: tuple[int, ...]
    keys: tuple[int, ...]
    epochs: int


def bin_stats(url: str, job: str, operator: str, bins: int, last_epochs: int) -> BinStats:
    """Load and size of every bin over the last `last_epochs` epochs that have bin metrics."""
    with session_scope(url) as s:
        top = s.scalar(
            select(func.max(m.BinMetrics.epoch)).where(m.BinMetrics.job == job, m.BinMetrics.operator == operator)
        )
        load = [0.0] * bins
        size = [0] * bins
        keys = [0] * bins
        if top is None:
            return BinStats(tuple(load), tuple(size), tuple(keys), 0)
        lo = top - last_epochs + 1
        rows = s.execute(
            select(m.BinMetrics.epoch, m.BinMetrics.bin, m.BinMetrics.records, m.BinMetrics.state_bytes,
                   m.BinMetrics.state_keys)
            .where(m.BinMetrics.job == job, m.BinMetrics.operator == operator, m.BinMetrics.epoch >= lo)
            .order_by(m.BinMetrics.epoch)
        ).all()
    seen: set[int] = set()
    for epoch, b, records, sbytes, skeys in rows:
        if not 0 <= b < bins:
            continue  # a bin outside the job's range is a data-plane bug, not a reason to crash
        seen.add(epoch)
        load[b] += records
        size[b] = int(sbytes or 0)  # ordered by epoch: the last one wins
        keys[b] = int(skeys or 0)
    return BinStats(tuple(load), tuple(size), tuple(keys), len(seen))


# ----------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True)
class CheckpointRow:
    plan_id: str
    step: int
    status: str
    applied_epoch: int | None
    applied_at: datetime | None
    completed_at: datetime
    bins_moved: int
    keys_moved: int
    bytes_moved: int
    migration_ms: float
    map_version_after: int | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["applied_at"] = self.applied_at.isoformat() if self.applied_at else None
        d["completed_at"] = self.completed_at.isoformat()
        return d


def _cp(r: m.StepCheckpoint) -> CheckpointRow:
    return CheckpointRow(r.plan_id, r.step, r.status, r.applied_epoch, _utc(r.applied_at),
                         _utc(r.completed_at), r.bins_moved, r.keys_moved,  # type: ignore[arg-type]
                         r.bytes_moved, r.migration_ms, r.map_version_after, r.reason or "")


def checkpoints(url: str, plan_id: str) -> dict[int, CheckpointRow]:
    """Checkpoints recorded so far for a plan, by step."""
    with session_scope(url) as s:
        rows = s.scalars(select(m.StepCheckpoint).where(m.StepCheckpoint.plan_id == plan_id)).all()
        return {r.step: _cp(r) for r in rows}


def recent_checkpoints(url: str, job: str, operator: str, limit: int = 200) -> list[CheckpointRow]:
    """Applied checkpoints with moves, newest first: the data a migration cost model is fitted on."""
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.StepCheckpoint)
            .where(m.StepCheckpoint.job == job, m.StepCheckpoint.operator == operator,
                   m.StepCheckpoint.status == "applied", m.StepCheckpoint.bins_moved > 0)
            .order_by(m.StepCheckpoint.completed_at.desc())
            .limit(limit)
        ).all()
        return [_cp(r) for r in rows]


# ----------------------------------------------------------------------------- decisions


@dataclass(frozen=True)
class DecisionRecord:
    id: int
    decided_at: datetime
    current_workers: int
    proposed_workers: int
    target_workers: int
    action: str
    reason: str
    inputs: dict[str, Any]
    plan_id: str | None


def save_decision(
    url: str, job: str, operator: str, *, current_workers: int, proposed_workers: int, target_workers: int,
    action: str, reason: str, inputs: dict[str, Any], plan_id: str | None = None, at: datetime | None = None,
) -> int:
    with session_scope(url) as s:
        row = m.Decision(
            job=job, operator=operator, decided_at=at or datetime.now(UTC),
            current_workers=current_workers, proposed_workers=proposed_workers, target_workers=target_workers,
            action=action, reason=reason, inputs=inputs, plan_id=plan_id,
        )
        s.add(row)
        s.flush()
        return int(row.id)


def link_decision(url: str, decision_id: int, plan_id: str) -> None:
    with session_scope(url) as s:
        s.execute(update(m.Decision).where(m.Decision.id == decision_id).values(plan_id=plan_id))


def latest_decision(url: str, job: str, operator: str) -> DecisionRecord | None:
    with session_scope(url) as s:
        r = s.scalars(
            select(m.Decision).where(m.Decision.job == job, m.Decision.operator == operator)
            .order_by(m.Decision.decided_at.desc(), m.Decision.id.desc()).limit(1)
        ).first()
        if r is None:
            return None
        return DecisionRecord(r.id, _utc(r.decided_at), r.current_workers, r.proposed_workers,  # type: ignore[arg-type]
                              r.target_workers, r.action, r.reason, dict(r.inputs or {}), r.plan_id)


# ----------------------------------------------------------------------------- plans
# in ballast.plan_store (re-exported above)

# ----------------------------------------------------------------------------- events, heartbeats


def add_event(url: str, job: str, operator: str, level: str, kind: str, message: str,
              epoch: int | None = None, details: dict[str, Any] | None = None) -> bool:
    """Record an event; an identical one (same job, operator, kind, epoch, message) is kept once."""
    try:
        with session_scope(url) as s:
            s.add(m.Event(job=job, operator=operator, at=datetime.now(UTC), level=level, kind=kind,
                          message=message, epoch=epoch, details=details or {}))
        return True
    except IntegrityError:
        return False


@dataclass(frozen=True)
class EventRow:
    at: datetime
    level: str
    kind: str
    message: str
    epoch: int | None
    details: dict[str, Any]


def events(url: str, job: str, operator: str | None = None, kind: str | None = None,
           limit: int = 50) -> list[EventRow]:
    """Newest first."""
    with session_scope(url) as s:
        q = select(m.Event).where(m.Event.job == job).order_by(m.Event.at.desc(), m.Event.id.desc()).limit(limit)
        if operator is not None:
            q = q.where(m.Event.operator == operator)
        if kind is not None:
            q = q.where(m.Event.kind == kind)
        return [EventRow(_utc(r.at), r.level, r.kind, r.message, r.epoch, dict(r.details or {}))  # type: ignore[arg-type]
                for r in s.scalars(q).all()]


@dataclass(frozen=True)
class HeartbeatRow:
    last_epoch: int
    map_version: int
    workers: int
    updated_at: datetime
    started_at: datetime
    pid: int
    host: str
    status: str
    executors: int | None = None  # executors the job holds now (cluster managers only)
    capacity: int | None = None  # most workers the cluster can run, as the job last saw it


def heartbeat(url: str, job: str, operator: str) -> HeartbeatRow | None:
    with session_scope(url) as s:
        r = s.get(m.Heartbeat, (job, operator))
        if r is None:
            return None
        return HeartbeatRow(r.last_epoch, r.map_version, r.workers, _utc(r.updated_at),  # type: ignore[arg-type]
                            _utc(r.started_at), r.pid, r.host, r.status, r.executors, r.capacity)  # type: ignore[arg-type]


def map_at(url: str, job: str, operator: str, map_version: int) -> MapSnapshot | None:
    """One specific map version (verification compares the version a plan should end at)."""
    with session_scope(url) as s:
        row = s.get(m.RoutingMap, (job, operator, map_version))
        if row is None:
            return None
        return MapSnapshot(job, operator, row.map_version, row.epoch, row.workers,
                           tuple(int(w) for w in row.assignment), row.plan_id, row.step)


# ----------------------------------------------------------------------------- console reads
# in ballast.console_reads, answered here lazily (PEP 562): that module builds on the records above,
# so importing it eagerly from here would be an import cycle.
_CONSOLE_READS = frozenset({
    "JobRow", "list_jobs", "map_versions", "SeriesPoint", "epoch_series", "epoch_at_or_after",
    "latest_epoch", "BinRange", "bin_range", "WorkerLoad", "worker_load", "decisions_since", "EventRecord",
    "events_since", "event_kinds", "rejected_checkpoints",
})


def __getattr__(name: str) -> Any:
    if name in _CONSOLE_READS:
        from ballast import console_reads

        return getattr(console_reads, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
