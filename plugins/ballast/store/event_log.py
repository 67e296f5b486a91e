"""Events of the control plane and the data plane, deduplicated by the DB.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from ballast.dbtime import as_utc
from migrations_db import models as m
from migrations_db.db import session_scope

#: a worker ran an epoch on a rebuilt local cache (spark_jobs.cache_fallback); the console warns
CACHE_DEGRADED = "cache_degraded"


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
        return [EventRow(as_utc(r.at), r.level, r.kind, r.message, r.epoch, dict(r.details or {}))  # type: ignore[arg-type]
                for r in s.scalars(q).all()]
