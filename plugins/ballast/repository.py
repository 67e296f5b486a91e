"""Typed reads and writes of the metrics DB for the control plane.

Every function opens its own short transaction (`session_scope`) and returns plain dataclasses,
never ORM objects, so callers (controller, emitter, trigger, plugin) can hold results across
sessions and serialise them to XCom. No Airflow import here: this module is used by the
triggerer, by tests and by the DAG tasks alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, Iterable

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from migrations_db import models as m
from migrations_db.db import session_scope


def _utc(ts: datetime | None) -> datetime | None:
    """SQLite drops tzinfo on the way back; every timestamp the control plane handles is UTC."""
    if ts is None:
        return None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


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


def _cp(r: m.Checkpoint) -> CheckpointRow:
    return CheckpointRow(r.plan_id, r.step, r.status, r.applied_epoch, _utc(r.applied_at),
                         _utc(r.completed_at), r.bins_moved, r.keys_moved,  # type: ignore[arg-type]
                         r.bytes_moved, r.migration_ms, r.map_version_after, r.reason or "")


def checkpoints(url: str, plan_id: str) -> dict[int, CheckpointRow]:
    """Checkpoints recorded so far for a plan, by step."""
    with session_scope(url) as s:
        rows = s.scalars(select(m.Checkpoint).where(m.Checkpoint.plan_id == plan_id)).all()
        return {r.step: _cp(r) for r in rows}


def recent_checkpoints(url: str, job: str, operator: str, limit: int = 200) -> list[CheckpointRow]:
    """Applied checkpoints with moves, newest first: the data a migration cost model is fitted on."""
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.Checkpoint)
            .where(m.Checkpoint.job == job, m.Checkpoint.operator == operator,
                   m.Checkpoint.status == "applied", m.Checkpoint.bins_moved > 0)
            .order_by(m.Checkpoint.completed_at.desc())
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
            job=job, operator=operator, decided_at=at or datetime.now(timezone.utc),
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


@dataclass(frozen=True)
class PlanRecord:
    plan_id: str
    job: str
    operator: str
    created_at: datetime
    strategy: str
    status: str
    source_map_version: int
    source_workers: int
    target_workers: int
    target_assignment: tuple[int, ...]
    steps: int
    params: dict[str, Any]
    predicted_ms: float | None
    reason: str
    finished_at: datetime | None


@dataclass(frozen=True)
class StepRecord:
    plan_id: str
    step: int
    payload: dict[str, Any]
    effective_at: datetime
    emitted_at: datetime | None
    kafka_partition: int | None
    kafka_offset: int | None
    predicted_ms: float | None

    @property
    def emitted(self) -> bool:
        return self.emitted_at is not None


def _plan(r: m.Plan) -> PlanRecord:
    return PlanRecord(r.plan_id, r.job, r.operator, _utc(r.created_at), r.strategy, r.status,  # type: ignore[arg-type]
                      r.source_map_version, r.source_workers, r.target_workers,
                      tuple(int(w) for w in r.target_assignment), r.steps, dict(r.params or {}),
                      r.predicted_ms, r.reason or "", _utc(r.finished_at))


def save_plan(url: str, plan: PlanRecord, steps: list[StepRecord]) -> None:
    """Store a plan and its steps in one transaction (a half-stored plan must never be emitted)."""
    with session_scope(url) as s:
        s.add(m.Plan(
            plan_id=plan.plan_id, job=plan.job, operator=plan.operator, created_at=plan.created_at,
            strategy=plan.strategy, status=plan.status, source_map_version=plan.source_map_version,
            source_workers=plan.source_workers, target_workers=plan.target_workers,
            target_assignment=list(plan.target_assignment), steps=plan.steps, params=plan.params,
            predicted_ms=plan.predicted_ms, reason=plan.reason, finished_at=plan.finished_at,
        ))
        for st in steps:
            s.add(m.PlanStep(
                plan_id=st.plan_id, step=st.step, payload=st.payload, effective_at=st.effective_at,
                emitted_at=st.emitted_at, kafka_partition=st.kafka_partition, kafka_offset=st.kafka_offset,
                predicted_ms=st.predicted_ms,
            ))


def get_plan(url: str, plan_id: str) -> PlanRecord | None:
    with session_scope(url) as s:
        r = s.get(m.Plan, plan_id)
        return _plan(r) if r else None


def plan_steps(url: str, plan_id: str) -> list[StepRecord]:
    with session_scope(url) as s:
        rows = s.scalars(select(m.PlanStep).where(m.PlanStep.plan_id == plan_id).order_by(m.PlanStep.step)).all()
        return [StepRecord(r.plan_id, r.step, dict(r.payload), _utc(r.effective_at), _utc(r.emitted_at),  # type: ignore[arg-type]
                           r.kafka_partition, r.kafka_offset, r.predicted_ms) for r in rows]


def open_plans(url: str, job: str, operator: str) -> list[PlanRecord]:
    """Plans not finished (planned or emitting), oldest first: at most one should exist per operator."""
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.Plan).where(m.Plan.job == job, m.Plan.operator == operator,
                                 m.Plan.status.in_(("planned", "emitting")))
            .order_by(m.Plan.created_at)
        ).all()
        return [_plan(r) for r in rows]


def recent_plans(url: str, limit: int = 50, job: str | None = None) -> list[PlanRecord]:
    with session_scope(url) as s:
        q = select(m.Plan).order_by(m.Plan.created_at.desc()).limit(limit)
        if job:
            q = q.where(m.Plan.job == job)
        return [_plan(r) for r in s.scalars(q).all()]


def claim_step_emission(url: str, plan_id: str, step: int, payload: dict[str, Any], effective_at: datetime) -> bool:
    """Rewrite the payload of a not-yet-emitted step just before sending (fresh issued/effective times).

    Returns False when the step was emitted meanwhile: the caller must not send it.
    """
    with session_scope(url) as s:
        res = s.execute(
            update(m.PlanStep)
            .where(m.PlanStep.plan_id == plan_id, m.PlanStep.step == step, m.PlanStep.emitted_at.is_(None))
            .values(payload=payload, effective_at=effective_at)
        )
        return res.rowcount == 1  # type: ignore[attr-defined]


def mark_step_emitted(url: str, plan_id: str, step: int, at: datetime, partition: int, offset: int) -> None:
    with session_scope(url) as s:
        s.execute(
            update(m.PlanStep).where(m.PlanStep.plan_id == plan_id, m.PlanStep.step == step)
            .values(emitted_at=at, kafka_partition=partition, kafka_offset=offset)
        )


def set_plan_status(url: str, plan_id: str, status: str, reason: str | None = None,
                    finished: bool = False) -> None:
    values: dict[str, Any] = {"status": status}
    if reason is not None:
        values["reason"] = reason
    if finished:
        values["finished_at"] = datetime.now(timezone.utc)
    with session_scope(url) as s:
        s.execute(update(m.Plan).where(m.Plan.plan_id == plan_id).values(**values))


# ----------------------------------------------------------------------------- events, heartbeats


def add_event(url: str, job: str, operator: str, level: str, kind: str, message: str,
              epoch: int | None = None, details: dict[str, Any] | None = None) -> bool:
    """Record an event; an identical one (same job, operator, kind, epoch, message) is kept once."""
    try:
        with session_scope(url) as s:
            s.add(m.Event(job=job, operator=operator, at=datetime.now(timezone.utc), level=level, kind=kind,
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


def last_finished_plan(url: str, job: str, operator: str) -> PlanRecord | None:
    with session_scope(url) as s:
        r = s.scalars(
            select(m.Plan).where(m.Plan.job == job, m.Plan.operator == operator, m.Plan.status == "completed")
            .order_by(m.Plan.finished_at.desc()).limit(1)
        ).first()
        return _plan(r) if r else None


# ----------------------------------------------------------------------------- console reads
# What the operator console (plugin.py, console.py) shows: bounded, aggregated reads over a time
# window or an epoch range, so a page refresh costs the same with a day of metrics as with a minute.


@dataclass(frozen=True)
class JobRow:
    job: str
    operator: str
    bins: int
    created_at: datetime


def list_jobs(url: str) -> list[JobRow]:
    """Every (job, operator) the data plane has registered, by name."""
    with session_scope(url) as s:
        rows = s.scalars(select(m.Job).order_by(m.Job.job, m.Job.operator)).all()
        return [JobRow(r.job, r.operator, r.bins, _utc(r.created_at)) for r in rows]  # type: ignore[arg-type]


def map_versions(url: str, job: str, operator: str, limit: int = 500) -> list[MapSnapshot]:
    """Recorded map versions, newest first."""
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.RoutingMap).where(m.RoutingMap.job == job, m.RoutingMap.operator == operator)
            .order_by(m.RoutingMap.map_version.desc()).limit(limit)
        ).all()
        return [MapSnapshot(job, operator, r.map_version, r.epoch, r.workers, tuple(int(w) for w in r.assignment),
                            r.plan_id, r.step) for r in rows]


@dataclass(frozen=True)
class SeriesPoint:
    """Epochs `first_epoch..last_epoch` folded into one point of a time series."""

    at: datetime
    first_epoch: int
    last_epoch: int
    epochs: int
    input_rate: float | None  # mean arrival rate, rows/s
    processed_rate: float | None  # rows the job applied per second of wall time
    backlog: int | None  # the largest backlog seen in the bucket
    batch_ms: float  # mean
    batch_ms_max: float
    migration_ms: float  # summed over the bucket
    workers: int  # the most workers seen in the bucket


def epoch_series(url: str, job: str, operator: str, since: datetime, max_points: int = 360) -> list[SeriesPoint]:
    """Epochs that ended at or after `since`, folded by epoch number into at most `max_points`."""
    em = m.EpochMetrics
    first = epoch_at_or_after(url, job, operator, since)
    if first is None:
        return []
    where = (em.job == job, em.operator == operator, em.epoch >= first, em.ended_at >= since)
    with session_scope(url) as s:
        n, lo, hi = s.execute(select(func.count(), func.min(em.epoch), func.max(em.epoch)).where(*where)).one()
        if not n:
            return []
        width = max(1, -(-(int(hi) - int(lo) + 1) // max_points))
        bucket = ((em.epoch - int(lo)) // width).label("bucket")
        rows = s.execute(
            select(bucket, func.min(em.ended_at), func.min(em.started_at), func.max(em.ended_at),
                   func.min(em.epoch), func.max(em.epoch), func.count(), func.avg(em.input_rate),
                   func.sum(em.input_rows), func.max(em.backlog), func.avg(em.batch_ms), func.max(em.batch_ms),
                   func.sum(em.migration_ms), func.max(em.workers))
            .where(*where).group_by(bucket).order_by(bucket)
        ).all()
    out = []
    for _b, at, t0, t1, e0, e1, cnt, rate, rows_in, backlog, bms, bmax, mig, w in rows:
        span = (_utc(t1) - _utc(t0)).total_seconds() if t0 and t1 else 0.0  # type: ignore[operator]
        out.append(SeriesPoint(
            _utc(at), int(e0), int(e1), int(cnt), float(rate) if rate is not None else None,  # type: ignore[arg-type]
            float(rows_in) / span if span > 0 and rows_in is not None else None,
            int(backlog) if backlog is not None else None, float(bms or 0.0), float(bmax or 0.0),
            float(mig or 0.0), int(w or 0),
        ))
    return out


def epoch_at_or_after(url: str, job: str, operator: str, since: datetime) -> int | None:
    """The first epoch that ended at or after `since` (None: none has), by a binary search on the
    primary key (epochs end in order): a few index seeks, not a scan of the job's whole history."""
    em = m.EpochMetrics
    key = (em.job == job, em.operator == operator)
    with session_scope(url) as s:
        # two queries: SQLite answers a lone min() or max() from the index, both together by a scan
        lo, hi = s.scalar(select(func.min(em.epoch)).where(*key)), s.scalar(select(func.max(em.epoch)).where(*key))
        if lo is None or hi is None:
            return None

        def at(e: int) -> tuple[int, datetime]:  # the first epoch >= e and when it ended
            row = s.execute(select(em.epoch, em.ended_at).where(*key, em.epoch >= e).order_by(em.epoch).limit(1)).one()
            return int(row[0]), _utc(row[1])  # type: ignore[return-value]

        if at(int(hi))[1] < since:
            return None
        lo, hi = int(lo), int(hi)  # the smallest x in lo..hi whose first epoch >= x ended in the window
        while lo < hi:
            mid = (lo + hi) // 2
            e, ended = at(mid)
            if ended >= since:
                hi = mid
            else:
                lo = e + 1  # every x in mid..e has this same (too early) epoch
        return at(lo)[0]


def latest_epoch(url: str, job: str, operator: str) -> int | None:
    """The newest epoch with metrics."""
    em = m.EpochMetrics
    with session_scope(url) as s:
        v = s.scalar(select(func.max(em.epoch)).where(em.job == job, em.operator == operator))
        return int(v) if v is not None else None


@dataclass(frozen=True)
class BinRange:
    """Per-bin load (records per epoch) over an epoch range, and the latest known size of each bin."""

    lo_epoch: int
    hi_epoch: int
    epochs: int  # epochs with metrics in the range (the load's divisor)
    load: tuple[float, ...]
    bytes: tuple[int, ...]
    keys: tuple[int, ...]
    worker: tuple[int | None, ...]  # the worker that last applied the bin's records


def bin_range(url: str, job: str, operator: str, bins: int, lo_epoch: int, hi_epoch: int,
              size_lookback: int = 500) -> BinRange:
    """Load per epoch of every bin in epochs lo..hi; size = the bin's last row at or before hi
    (up to `size_lookback` epochs back: a bin no record touched lately keeps its last size)."""
    bm, em = m.BinMetrics, m.EpochMetrics
    load = [0.0] * bins
    size = [0] * bins
    keys = [0] * bins
    owner: list[int | None] = [None] * bins
    with session_scope(url) as s:
        epochs = s.scalar(select(func.count()).where(em.job == job, em.operator == operator,
                                                     em.epoch >= lo_epoch, em.epoch <= hi_epoch)) or 0
        for b, total in s.execute(
            select(bm.bin, func.sum(bm.records)).where(bm.job == job, bm.operator == operator,
                                                       bm.epoch >= lo_epoch, bm.epoch <= hi_epoch)
            .group_by(bm.bin)
        ).all():
            if 0 <= b < bins:
                load[b] = float(total or 0) / max(1, int(epochs))
        last = (
            select(bm.bin.label("bin"), func.max(bm.epoch).label("epoch"))
            .where(bm.job == job, bm.operator == operator, bm.epoch <= hi_epoch,
                   bm.epoch > hi_epoch - max(size_lookback, hi_epoch - lo_epoch + 1))
            .group_by(bm.bin).subquery()
        )
        for b, sbytes, skeys, w in s.execute(
            select(bm.bin, bm.state_bytes, bm.state_keys, bm.worker)
            .join(last, (bm.bin == last.c.bin) & (bm.epoch == last.c.epoch))
            .where(bm.job == job, bm.operator == operator)
        ).all():
            if 0 <= b < bins:
                size[b], keys[b], owner[b] = int(sbytes or 0), int(skeys or 0), int(w)
    return BinRange(lo_epoch, hi_epoch, int(epochs), tuple(load), tuple(size), tuple(keys), tuple(owner))


@dataclass(frozen=True)
class WorkerLoad:
    worker: int
    records_per_epoch: float
    useful_ms_per_epoch: float
    busy: float  # useful / wall time
    state_bytes: int  # at the range's last epoch with a row for this worker
    state_keys: int


def worker_load(url: str, job: str, operator: str, lo_epoch: int, hi_epoch: int) -> list[WorkerLoad]:
    """Per worker over epochs lo..hi: mean records and useful time per epoch, busy share, last size."""
    wm = m.WorkerMetrics
    with session_scope(url) as s:
        agg = s.execute(
            select(wm.worker, func.count(), func.sum(wm.records_in), func.sum(wm.useful_ms), func.sum(wm.wall_ms),
                   func.max(wm.epoch))
            .where(wm.job == job, wm.operator == operator, wm.epoch >= lo_epoch, wm.epoch <= hi_epoch)
            .group_by(wm.worker).order_by(wm.worker)
        ).all()
        out = []
        for w, n, rec, useful, wall, top in agg:
            last = s.get(wm, (job, operator, top, w))
            out.append(WorkerLoad(int(w), float(rec or 0) / max(1, n), float(useful or 0) / max(1, n),
                                  float(useful or 0) / float(wall) if wall else 0.0,
                                  int(last.state_bytes) if last else 0, int(last.state_keys) if last else 0))
        return out


def decisions_since(url: str, job: str, operator: str, since: datetime, limit: int = 1000) -> list[DecisionRecord]:
    """DS2 decisions at or after `since`, oldest first (the newest `limit` of them)."""
    d = m.Decision
    with session_scope(url) as s:
        rows = s.scalars(
            select(d).where(d.job == job, d.operator == operator, d.decided_at >= since)
            .order_by(d.decided_at.desc(), d.id.desc()).limit(limit)
        ).all()
        out = [DecisionRecord(r.id, _utc(r.decided_at), r.current_workers, r.proposed_workers,  # type: ignore[arg-type]
                              r.target_workers, r.action, r.reason, dict(r.inputs or {}), r.plan_id) for r in rows]
    return out[::-1]


@dataclass(frozen=True)
class EventRecord:
    id: int
    at: datetime
    operator: str
    level: str
    kind: str
    message: str
    epoch: int | None
    details: dict[str, Any]


def events_since(url: str, job: str, since: datetime, *, levels: Iterable[str] = (), kinds: Iterable[str] = (),
                 text: str = "", limit: int = 500) -> list[EventRecord]:
    """A job's events at or after `since`, newest first, filtered by level, kind and a substring."""
    e = m.Event
    q = select(e).where(e.job == job, e.at >= since)
    if levels := [x for x in levels if x]:
        q = q.where(e.level.in_(levels))
    if kinds := [x for x in kinds if x]:
        q = q.where(e.kind.in_(kinds))
    if text:
        q = q.where(func.lower(e.message).contains(text.lower(), autoescape=True))
    with session_scope(url) as s:
        rows = s.scalars(q.order_by(e.at.desc(), e.id.desc()).limit(limit)).all()
        return [EventRecord(r.id, _utc(r.at), r.operator, r.level, r.kind, r.message, r.epoch,  # type: ignore[arg-type]
                            dict(r.details or {})) for r in rows]


def event_kinds(url: str, job: str) -> list[str]:
    """Every event kind a job has recorded (for the console's filter)."""
    with session_scope(url) as s:
        return sorted(k for (k,) in s.execute(select(m.Event.kind).where(m.Event.job == job).distinct()).all())


def rejected_checkpoints(url: str, job: str, since: datetime, limit: int = 200) -> list[CheckpointRow]:
    """Steps the job refused or superseded (stale map version, bad payload), newest first."""
    c = m.Checkpoint
    with session_scope(url) as s:
        rows = s.scalars(
            select(c).where(c.job == job, c.status != "applied", c.completed_at >= since)
            .order_by(c.completed_at.desc()).limit(limit)
        ).all()
        return [_cp(r) for r in rows]
