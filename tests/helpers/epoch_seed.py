"""Per-epoch metrics rows for the retention tests: the store's pruning (tests/store/test_retention.py)
and the retention DAG (tests/dags/test_ballast_retention.py) seed and count the same rows, so the
seeding lives here rather than in one test module that the other imports. Rows are counted with
a query of the test's own (count_rows), not through the store under test."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import func, select

from ballast.store import traces, writer
from ballast.tracing import Activity, Message, Trace
from migrations_db import models as m
from migrations_db.db import session_scope


def seed_epochs(url: str, job: str, epochs: int, bins: int, now: datetime) -> None:
    """One epoch a minute ending at `now`; bin 0 is touched only in epoch 1 (a cold bin); a trace per
    epoch. Written through the store's writer, one transaction per epoch, as the data plane's commit
    writes them."""
    writer.ensure_job_row(url, job, "keycount", bins, {}, now)
    for e in range(1, epochs + 1):
        end = now - timedelta(minutes=epochs - e)
        with writer.epoch_transaction(url) as s:
            writer.replace_epoch_metrics(
                s, job, "keycount", e,
                m.EpochMetrics(job=job, operator="keycount", epoch=e, map_version=0, workers=2, input_rows=100,
                               batch_ms=500.0, started_at=end - timedelta(seconds=1), ended_at=end),
                [m.WorkerMetrics(job=job, operator="keycount", epoch=e, worker=w, records_in=50, records_out=50,
                                 useful_ms=10.0, wall_ms=20.0, state_keys=5, state_bytes=500) for w in range(2)],
                [{"job": job, "operator": "keycount", "epoch": e, "bin": b, "worker": b % 2, "records": 10,
                  "state_keys": 1, "state_bytes": 1000 + b} for b in range(bins) if b > 0 or e == 1])
            t0 = int((end - timedelta(seconds=1)).timestamp() * 1e6)
            traces.replace_trace(s, traces.trace_row(job, "keycount", e, Trace((
                Activity("driver", "plan", t0, t0 + 10), Activity("worker 0", "fold", t0 + 20, t0 + 900)),
                (Message(0, 1, "source stage"),))))


def count_rows(url: str, table: type[m.Base], job: str) -> int:
    """How many rows of `table` belong to `job`."""
    with session_scope(url) as s:
        return int(s.scalar(select(func.count()).select_from(table).where(table.job == job)) or 0)  # type: ignore[attr-defined]
