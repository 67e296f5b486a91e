"""Routing maps and the heartbeat: which map is in force and whether the job is alive.

Every function opens its own short transaction and returns frozen dataclasses, never ORM
objects, so callers can hold results across sessions and serialise them to XCom.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select

from ballast.dbtime import as_utc
from migrations_db import models as m
from migrations_db.db import session_scope


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


def bins_in_force_since(url: str, job: str, operator: str) -> int:
    """The first epoch from which the current bin count holds (0: always). Bin metrics of earlier
    epochs number bins at another count (before a split or a merge) and must not be mixed with today's."""
    with session_scope(url) as s:
        rows = s.execute(
            select(m.RoutingMap.epoch, m.RoutingMap.assignment)
            .where(m.RoutingMap.job == job, m.RoutingMap.operator == operator)
            .order_by(m.RoutingMap.map_version.desc())
        )
        bins, since = None, 0
        for epoch, assignment in rows:
            if bins is None:
                bins = len(assignment)
            elif len(assignment) != bins:
                break
            since = int(epoch)
        return since


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
    spark_ui_url: str | None = None  # where the driver's Spark UI answers (None: off)


def heartbeat(url: str, job: str, operator: str) -> HeartbeatRow | None:
    with session_scope(url) as s:
        r = s.get(m.Heartbeat, (job, operator))
        if r is None:
            return None
        return HeartbeatRow(r.last_epoch, r.map_version, r.workers, as_utc(r.updated_at),  # type: ignore[arg-type]
                            as_utc(r.started_at), r.pid, r.host, r.status, r.executors, r.capacity,  # type: ignore[arg-type]
                            r.spark_ui_url)


def map_at(url: str, job: str, operator: str, map_version: int) -> MapSnapshot | None:
    """One specific map version (verification compares the version a plan should end at)."""
    with session_scope(url) as s:
        row = s.get(m.RoutingMap, (job, operator, map_version))
        if row is None:
            return None
        return MapSnapshot(job, operator, row.map_version, row.epoch, row.workers,
                           tuple(int(w) for w in row.assignment), row.plan_id, row.step)
