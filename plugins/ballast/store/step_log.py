"""Reads of the data plane's step decision log (`step_decisions`): when a step was queued,
applied or rejected, by epoch, and a waiting handover's progress. The log is written only by the
epoch commit (ballast.store.writer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select

from ballast.store.step_checkpoints import CheckpointRow, checkpoint_row
from migrations_db import models as m
from migrations_db.db import session_scope


def first_decision_epoch(url: str, job: str, operator: str, plan_id: str, action: str) -> int | None:
    """The first epoch at which the job logged `action` (e.g. "queue") for a step of the plan."""
    with session_scope(url) as s:
        epoch = s.scalar(
            select(func.min(m.StepDecision.epoch)).where(
                m.StepDecision.job == job, m.StepDecision.operator == operator,
                m.StepDecision.plan_id == plan_id, m.StepDecision.action == action)
        )
        return None if epoch is None else int(epoch)


def latest_step_note(url: str, job: str, operator: str, plan_id: str, step: int) -> str:
    """What the job last logged about a step it has not finished (a pre-copy warming, a shadow
    upgrade's comparison so far); "" when nothing."""
    with session_scope(url) as s:
        reason = s.scalar(
            select(m.StepDecision.reason).where(
                m.StepDecision.job == job, m.StepDecision.operator == operator,
                m.StepDecision.plan_id == plan_id, m.StepDecision.step == step)
            .order_by(m.StepDecision.epoch.desc(), m.StepDecision.seq.desc()).limit(1))
        return reason or ""


@dataclass(frozen=True)
class HandoverRecord:
    """A handover step (docs/handover.md) as the job logged it: its progress at each epoch it waited
    (`StepDecision.payload["handover"]`: since, migration, activation, boundary, moves, watermark,
    windows_left; event times in ms), oldest first, and its checkpoint once it ended."""

    plan_id: str
    step: int
    epochs: tuple[int, ...]
    progress: tuple[dict[str, Any], ...]
    checkpoint: CheckpointRow | None


def _waiting(d: type[m.StepDecision]) -> Any:
    return (d.action == "queue") & d.reason.startswith("handover:", autoescape=True)


def latest_handover(url: str, job: str, operator: str) -> tuple[str, int] | None:
    """(plan id, step) of the newest handover the job logged waiting; None when it never did."""
    d = m.StepDecision
    with session_scope(url) as s:
        row = s.execute(select(d.plan_id, d.step).where(d.job == job, d.operator == operator, _waiting(d))
                        .order_by(d.epoch.desc(), d.seq.desc()).limit(1)).first()
        return None if row is None else (str(row[0]), int(row[1]))


def handover_record(url: str, job: str, operator: str, plan_id: str, step: int,
                    limit: int = 200) -> HandoverRecord | None:
    """A handover step's logged progress over the last `limit` epochs it waited and its checkpoint;
    None when the job never logged it waiting (not a handover, or one that applied at once)."""
    d = m.StepDecision
    with session_scope(url) as s:
        rows = s.execute(select(d.epoch, d.payload).where(
            d.job == job, d.operator == operator, d.plan_id == plan_id, d.step == step, _waiting(d))
            .order_by(d.epoch.desc(), d.seq.desc()).limit(limit)).all()
        cp = s.get(m.StepCheckpoint, (job, operator, plan_id, step))
        logged = [(int(e), p["handover"]) for e, p in reversed(rows)
                  if isinstance(p, dict) and isinstance(p.get("handover"), dict)]
        if not logged:
            return None
        return HandoverRecord(plan_id, step, tuple(e for e, _ in logged), tuple(p for _, p in logged),
                              checkpoint_row(cp) if cp is not None else None)
