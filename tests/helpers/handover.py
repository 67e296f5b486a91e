"""What the handover system tests read of a job (tests/system/test_handover_job.py,
test_nexmark_handover.py; docs/handover.md): a plan's decision log, the handover's timestamps as the
log states them, the new owner's `moved_in` report, the latest map, and the bin of a key."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import bits_for, routing_sql, uniform_assignment
from spark_jobs.durable import find_object
from spark_jobs.objects import read_meta

# spark_jobs.control_handover.waiting_text
_TIMES = re.compile(r"handover: both owners get the bins' rows since epoch (\d+); the old owner finishes the windows "
                    r"up to (\d+) ms \(migration (\d+) ms, the new owner's windows from (\d+) ms\)")


def decisions(db_url: str, job: str, plan: str) -> list[m.StepDecision]:
    """The job's decisions about `plan`'s steps, in epoch order."""
    with session_scope(db_url) as s:
        return sorted(s.scalars(select(m.StepDecision).where(m.StepDecision.job == job,
                                                             m.StepDecision.plan_id == plan)),
                      key=lambda d: (d.epoch, d.seq))


def handover_times(ds: Sequence[m.StepDecision]) -> dict[str, int]:
    """since, migration, activation and boundary of the handover the decisions queued (its first
    "handover: ..." reason: they are fixed at the step's first epoch)."""
    for d in ds:
        hit = _TIMES.match(d.reason or "")
        if d.action == "queue" and hit:
            since, boundary, migration, activation = (int(g) for g in hit.groups())
            return {"since": since, "migration": migration, "activation": activation, "boundary": boundary}
    raise AssertionError(f"no handover queued: {[(d.epoch, d.action, d.reason) for d in ds]}")


def moved_in(state_uri: str, epoch: int, worker: int) -> dict[int, dict[str, Any]]:
    """The `moved_in` of `worker`'s task metrics at `epoch` (its changelog object's metadata)."""
    loc = find_object(state_uri, "changelog", epoch, worker)
    assert loc is not None, f"no changelog object of worker {worker} at epoch {epoch}"
    metrics = read_meta(loc).get("metrics", {})
    return {int(b): info for b, info in (metrics.get("moved_in") or {}).items()}


def latest_map(db_url: str, job: str) -> m.RoutingMap:
    with session_scope(db_url) as s:
        row = s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)
                        .order_by(m.RoutingMap.map_version.desc())).first()
        assert row is not None
        s.expunge(row)
        return row


def bins_of(spark: Any, keys: Sequence[bytes], bins: int) -> dict[bytes, int]:
    """key -> its bin at `bins` bins, by the routing's own Spark SQL (spark_jobs.bins.routing_sql)."""
    if not keys:
        return {}
    _, b, _ = routing_sql("k", bits_for(bins), uniform_assignment(bins, 1))
    rows = ", ".join(f"(unhex('{k.hex()}'))" for k in sorted(set(keys)))
    return {bytes(r.k): int(r.bin) for r in spark.sql(f"SELECT k, {b} AS bin FROM VALUES {rows} AS t(k)").collect()}


def bin_records(db_url: str, job: str) -> dict[int, int]:
    """bin -> the records its metrics counted over the run."""
    out: dict[int, int] = {}
    with session_scope(db_url) as s:
        for r in s.scalars(select(m.BinMetrics).where(m.BinMetrics.job == job)):
            out[r.bin] = out.get(r.bin, 0) + r.records
    return out
