"""DS2's decisions (table `decisions`), saved by the controller and read by the console.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select, update

from ballast.dbtime import as_utc
from migrations_db import models as m
from migrations_db.db import session_scope


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
            job=job, operator=operator, decided_at=at or datetime.now(UTC),
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
        return DecisionRecord(r.id, as_utc(r.decided_at), r.current_workers, r.proposed_workers,  # type: ignore[arg-type]
                              r.target_workers, r.action, r.reason, dict(r.inputs or {}), r.plan_id)
