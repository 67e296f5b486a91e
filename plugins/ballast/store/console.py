"""What the console reads from the metrics DB: bounded, aggregated reads over a time
window or an epoch range, so a page refresh costs the same with a day of metrics as with a minute.

The record types it shares with the controller live in their own store modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, func, select

from ballast.dbtime import as_utc as _utc
from ballast.store.decisions import DecisionRecord
from ballast.store.maps import MapSnapshot
from ballast.store.step_checkpoints import CheckpointRow, checkpoint_row
from migrations_db import models as m
from migrations_db.db import session_scope


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


def dead_letter_counts(url: str, job: str, operator: str, since: datetime) -> tuple[int, int]:
    """Records the job sent to `<job>.dlq`: over the epochs the DB keeps, and in epochs that ended
    at or after `since` (the data plane counts them per epoch, docs/dataplane.md)."""
    em = m.EpochMetrics
    recent = func.sum(case((em.ended_at >= since, em.dead_letters), else_=0))
    with session_scope(url) as s:
        total, last = s.execute(select(func.sum(em.dead_letters), recent)
                                .where(em.job == job, em.operator == operator)).one()
    return int(total or 0), int(last or 0)


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
    c = m.StepCheckpoint
    with session_scope(url) as s:
        rows = s.scalars(
            select(c).where(c.job == job, c.status != "applied", c.completed_at >= since)
            .order_by(c.completed_at.desc()).limit(limit)
        ).all()
        return [checkpoint_row(r) for r in rows]
