"""Step checkpoints (completion records of plan steps) as the control plane reads them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from ballast.dbtime import as_utc
from migrations_db import models as m
from migrations_db.db import session_scope


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


def checkpoint_row(r: m.StepCheckpoint) -> CheckpointRow:
    """The frozen record of one ORM row (shared with the console reads)."""
    return CheckpointRow(r.plan_id, r.step, r.status, r.applied_epoch, as_utc(r.applied_at),
                         as_utc(r.completed_at), r.bins_moved, r.keys_moved,  # type: ignore[arg-type]
                         r.bytes_moved, r.migration_ms, r.map_version_after, r.reason or "")


def checkpoints(url: str, plan_id: str) -> dict[int, CheckpointRow]:
    """Checkpoints recorded so far for a plan, by step."""
    with session_scope(url) as s:
        rows = s.scalars(select(m.StepCheckpoint).where(m.StepCheckpoint.plan_id == plan_id)).all()
        return {r.step: checkpoint_row(r) for r in rows}


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
        return [checkpoint_row(r) for r in rows]
