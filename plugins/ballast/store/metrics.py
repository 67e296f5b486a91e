"""Per-epoch reads of epoch, worker and bin metrics: DS2's observations and the bench's figures.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from sqlalchemy import func, select

from ballast.dbtime import as_utc
from migrations_db import models as m
from migrations_db.db import session_scope

_M = TypeVar("_M", m.EpochMetrics, m.WorkerMetrics)


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
        out = [_epoch(r) for r in rows]
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
            (_worker(r) for r in rows if r.epoch in set(ids)),
            key=lambda w: (w.epoch, w.worker),
        )


@dataclass(frozen=True)
class BinStats:
    """Per-bin load (records over the window), size (latest state bytes/keys seen) and the time
    its folds took over the window (µs; zeros where the data plane did not measure it)."""

    load: tuple[float, ...]
    bytes: tuple[int, ...]
    keys: tuple[int, ...]
    epochs: int
    fold_us: tuple[int, ...] = ()


def bin_stats(url: str, job: str, operator: str, bins: int, last_epochs: int, since_epoch: int = 0) -> BinStats:
    """Load and size of every bin over the last `last_epochs` epochs that have bin metrics, from
    `since_epoch` on (bins are numbered at one count from there: ballast.store.maps.bins_in_force_since)."""
    with session_scope(url) as s:
        top = s.scalar(
            select(func.max(m.BinMetrics.epoch)).where(m.BinMetrics.job == job, m.BinMetrics.operator == operator)
        )
        load = [0.0] * bins
        size = [0] * bins
        keys = [0] * bins
        fold = [0] * bins
        if top is None:
            return BinStats(tuple(load), tuple(size), tuple(keys), 0, tuple(fold))
        lo = max(top - last_epochs + 1, since_epoch)
        rows = s.execute(
            select(m.BinMetrics.epoch, m.BinMetrics.bin, m.BinMetrics.records, m.BinMetrics.state_bytes,
                   m.BinMetrics.state_keys, m.BinMetrics.fold_us)
            .where(m.BinMetrics.job == job, m.BinMetrics.operator == operator, m.BinMetrics.epoch >= lo)
            .order_by(m.BinMetrics.epoch)
        ).all()
    seen: set[int] = set()
    for epoch, b, records, sbytes, skeys, fold_us in rows:
        if not 0 <= b < bins:
            continue  # a bin outside the job's range is a data-plane bug, not a reason to crash
        seen.add(epoch)
        load[b] += records
        fold[b] += int(fold_us or 0)
        size[b] = int(sbytes or 0)  # ordered by epoch: the last one wins
        keys[b] = int(skeys or 0)
    return BinStats(tuple(load), tuple(size), tuple(keys), len(seen), tuple(fold))



def _epoch(r: m.EpochMetrics) -> EpochRow:
    return EpochRow(r.epoch, r.map_version, r.workers, r.input_rows, r.batch_ms, r.migration_ms,
                    r.input_rate, r.backlog, as_utc(r.started_at), as_utc(r.ended_at))  # type: ignore[arg-type]


def _worker(r: m.WorkerMetrics) -> WorkerRow:
    return WorkerRow(r.epoch, r.worker, r.records_in, r.records_out, r.useful_ms, r.wall_ms,
                     r.state_keys, r.state_bytes)


def epoch_rows(url: str, job: str, operator: str, since_epoch: int = 0) -> list[EpochRow]:
    """Every epoch from `since_epoch` on, oldest first (the bench's whole-run figures)."""
    return [_epoch(r) for r in _since(url, m.EpochMetrics, job, operator, since_epoch)]


def worker_rows(url: str, job: str, operator: str, since_epoch: int = 0) -> list[WorkerRow]:
    """Every per-worker row from `since_epoch` on, by (epoch, worker)."""
    rows = _since(url, m.WorkerMetrics, job, operator, since_epoch)
    return sorted((_worker(r) for r in rows), key=lambda w: (w.epoch, w.worker))


def _since(url: str, model: type[_M], job: str, operator: str, since_epoch: int) -> list[_M]:
    """One operator's rows of a per-epoch table from `since_epoch` on, by epoch."""
    with session_scope(url) as s:
        rows = s.scalars(select(model).where(model.job == job, model.operator == operator,
                                             model.epoch >= since_epoch)
                         .order_by(model.epoch)).all()
        return list(rows)
