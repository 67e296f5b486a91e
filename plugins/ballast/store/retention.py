"""Retention of the per-epoch metrics tables, which grow with every micro-batch forever otherwise.

`bin_metrics` gets one row per touched bin per epoch (thousands with B=4096), `worker_metrics`
W rows, `epoch_metrics` and `epoch_traces` one (a trace: a few dozen activities). What the
readers need, and so what is kept:
* the controller reads the last `rebalance.window_epochs` epochs (tens);
* the console reads a time window of at most 24 h (console.WINDOWS) and looks a bin's last size
  up to 500 epochs back (ballast.store.console.bin_range);
* a cold bin's last row is its only size record: it is kept whatever its age.
Other tables are not per epoch and are left alone: `step_decisions` and `checkpoints` grow per
control step (the data plane replays from them), `decisions`, `plans`, `events` per controller run.
Deletes go in epoch chunks, each its own transaction, so the data plane's writes are never held
behind one long delete (SQLite has a single writer).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, delete, func, select

from ballast.store.console import epoch_at_or_after, latest_epoch, list_jobs
from migrations_db import models as m
from migrations_db.db import session_scope

DEFAULT_KEEP = timedelta(hours=48)  # twice the console's widest window
DEFAULT_KEEP_EPOCHS = 1000  # > the console's 500-epoch size look-back and any controller window
CHUNK_EPOCHS = 500


@dataclass(frozen=True)
class Pruned:
    """What one (job, operator) lost: rows per table, and the first epoch kept."""

    job: str
    operator: str
    keep_from_epoch: int | None
    epoch_rows: int = 0
    worker_rows: int = 0
    bin_rows: int = 0
    trace_rows: int = 0


def retention_cutoff(url: str, job: str, operator: str, keep: timedelta, keep_epochs: int,
                     now: datetime | None = None) -> int | None:
    """The first epoch to keep: the older of (first epoch that ended within `keep`) and
    (the newest epoch − keep_epochs + 1). None: nothing to delete."""
    top = latest_epoch(url, job, operator)
    if top is None:
        return None
    by_count = top - max(1, keep_epochs) + 1
    by_time = epoch_at_or_after(url, job, operator, (now or datetime.now(UTC)) - keep)
    return min(by_count, by_time) if by_time is not None else by_count


def _delete_chunked(url: str, table: type[m.Base], job: str, operator: str, lo: int, cutoff: int,
                    *extra: ColumnElement[bool]) -> int:
    n = 0
    for start in range(lo, cutoff, CHUNK_EPOCHS):
        with session_scope(url) as s:
            res = s.execute(delete(table).where(
                table.job == job, table.operator == operator,  # type: ignore[attr-defined]
                table.epoch >= start, table.epoch < min(cutoff, start + CHUNK_EPOCHS), *extra))  # type: ignore[attr-defined]
            n += int(res.rowcount or 0)  # type: ignore[attr-defined]
    return n


def prune_job(url: str, job: str, operator: str, keep: timedelta = DEFAULT_KEEP,
              keep_epochs: int = DEFAULT_KEEP_EPOCHS, now: datetime | None = None) -> Pruned:
    """Delete one operator's per-epoch rows older than the cutoff, keeping every bin's last row."""
    cutoff = retention_cutoff(url, job, operator, keep, keep_epochs, now)
    if cutoff is None:
        return Pruned(job, operator, None)
    em, wm, bm, tr = m.EpochMetrics, m.WorkerMetrics, m.BinMetrics, m.EpochTrace
    with session_scope(url) as s:
        lo = min((v for v in (s.scalar(select(func.min(t.epoch)).where(t.job == job, t.operator == operator))
                              for t in (em, wm, bm, tr)) if v is not None), default=cutoff)
        # bins whose newest row is older than the cutoff: that row is their only size record
        cold = dict(s.execute(select(bm.bin, func.max(bm.epoch)).where(bm.job == job, bm.operator == operator)
                              .group_by(bm.bin).having(func.max(bm.epoch) < cutoff)).all())
    bins = _delete_chunked(url, bm, job, operator, lo, cutoff, bm.bin.not_in(list(cold)))
    for b, last in cold.items():
        with session_scope(url) as s:
            res = s.execute(delete(bm).where(bm.job == job, bm.operator == operator, bm.bin == b, bm.epoch < last))
            bins += int(res.rowcount or 0)  # type: ignore[attr-defined]
    workers = _delete_chunked(url, wm, job, operator, lo, cutoff)
    epochs = _delete_chunked(url, em, job, operator, lo, cutoff)
    traces = _delete_chunked(url, tr, job, operator, lo, cutoff)
    return Pruned(job, operator, cutoff, epochs, workers, bins, traces)


def prune_epoch_metrics(url: str, keep: timedelta = DEFAULT_KEEP, keep_epochs: int = DEFAULT_KEEP_EPOCHS,
                        now: datetime | None = None) -> list[Pruned]:
    """Prune every registered (job, operator); see the module docstring for what is kept."""
    if keep <= timedelta(0) or keep_epochs < 1:
        raise ValueError(f"retention must keep something: keep={keep}, keep_epochs={keep_epochs}; "
                         "give a positive window and at least one epoch")
    return [prune_job(url, j.job, j.operator, keep, keep_epochs, now) for j in list_jobs(url)]
