"""What the handover system tests do to and read of a job (tests/system/test_handover_job.py,
test_nexmark_handover.py, test_handover_sessions_job.py; docs/handover.md): a handover step run on a
live window job to its checkpoint and the checks every applied one passes, a plan's decision log, the
handover's timestamps as the log states them, the new owner's `moved_in` report, the latest map, and
the bin of a key."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import bits_for, routing_sql, uniform_assignment
from spark_jobs.durable import find_object
from spark_jobs.objects import read_meta

# spark_jobs.control_handover.waiting_text (grid windows, or sessions)
_TIMES = re.compile(r"handover: both owners get the bins' rows since epoch (\d+); the old owner finishes the "
                    r"(?:windows up to|sessions that start before) (\d+) ms \(migration (\d+) ms, the new "
                    r"owner's (?:windows|sessions) from (\d+) ms\)")


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


@dataclass
class HandoverRun:
    """A handover step sent to a live WindowJob and run to its checkpoint (`run_handover`)."""

    bins: list[int]
    cp: Any  # the step's StepCheckpoint
    reported: dict[int, dict[str, Any]]  # the new owner's `moved_in` at the applying epoch
    during_input: bool  # applied before the flush record
    final_assignment: list[int]
    queued: list[m.StepDecision]


def run_handover(w: Any, kafka_bootstrap: str, db_url: str, plan: str, pick: Callable[[], list[int]],
                 reason: str) -> HandoverRun:
    """After a few epochs, hand the bins `pick()` names over from worker 0 to 1 (a live step); wait for
    its checkpoint (or every event consumed), finish the input (the flush record carries the
    watermark past what is left), wait for the checkpoint; the runner is stopped either way."""
    from ballast.protocol import Move
    from tests.helpers.control import live_step, send_control
    from tests.helpers.dp_helpers import checkpoints, consumed_rows
    from tests.helpers.wait import wait_until

    job, op = w.job, w.operator
    ckpt = w.cfg.checkpoint_dir + "/spark"

    def done() -> Any:
        return checkpoints(db_url, job).get((plan, 1))

    try:
        wait_until(lambda: (w.runner.last_epoch or 0) >= 2, 180, "a few epochs", check=w.alive)
        bins = pick()
        step = live_step(job, plan, 0, operator=op, kind="moves", moves=tuple(Move(b, 0, 1) for b in bins),
                         handover=True, reason=reason)
        send_control(kafka_bootstrap, job, [step.to_json()], operator=op)
        wait_until(lambda: done() is not None or consumed_rows(ckpt, w.topic) == len(w.evs), 300,
                   "the handover's checkpoint, or every event consumed", check=w.alive)
        reported = None
        cp = done()
        if cp is not None and cp.status == "applied":  # read now: retention may drop the epoch later
            reported = moved_in(w.cfg.state_location, cp.applied_epoch, 1)
        during_input = cp is not None
        w.finish()
        cp = wait_until(done, 120, "the handover's checkpoint after the flush", check=w.alive)
        assert cp.status == "applied", f"handover {cp.status}: {cp.reason}"
        if reported is None:
            reported = moved_in(w.cfg.state_location, cp.applied_epoch, 1)
        st = w.runner._state
        assert st is not None
        final = list(st.assignment)
    finally:
        w.runner.stop()
    queued = [d for d in decisions(db_url, job, plan) if d.action == "queue"]
    return HandoverRun(bins, cp, reported, during_input, final, queued)


def check_applied(db_url: str, w: Any, r: HandoverRun, plan: str, bins: int) -> None:
    """The step applied once, after the epochs it waited, with 0 keys and 0 bytes moved (its
    checkpoint and the new owner's report of each bin); the map moved exactly its bins to worker 1;
    every window once, equal to the job's reference; every bin's metrics from the map's worker."""
    from tests.helpers.dp_helpers import check_migration_property

    cp = r.cp
    applies = [d for d in decisions(db_url, w.job, plan) if d.action == "apply"]
    assert [d.epoch for d in applies] == [cp.applied_epoch], [(d.epoch, d.action, d.reason) for d in applies]
    assert r.queued and max(d.epoch for d in r.queued) < cp.applied_epoch
    assert (cp.bins_moved, cp.keys_moved, cp.bytes_moved) == (len(r.bins), 0, 0), \
        (cp.bins_moved, cp.keys_moved, cp.bytes_moved)
    assert cp.map_version_after == 1
    assert set(r.reported) == set(r.bins), f"worker 1 reported moved_in {r.reported} at epoch {cp.applied_epoch}"
    for b, info in r.reported.items():
        assert (info.get("mode"), int(info["keys"]), int(info["bytes"])) == ("handover", 0, 0), (b, info)
    expected_map = list(uniform_assignment(bins, 2))
    for b in r.bins:
        expected_map[b] = 1
    latest = latest_map(db_url, w.job)
    assert (latest.map_version, latest.epoch) == (1, cp.applied_epoch)
    assert list(latest.assignment) == expected_map == r.final_assignment
    w.check()
    # a fresh bin's rows are not the bin's metrics: every bin's records come from the map's worker
    assert check_migration_property(db_url, w.job) > 0
