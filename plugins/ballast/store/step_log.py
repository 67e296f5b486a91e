"""Reads of the data plane's step decision log (`step_decisions`): when a step was queued,
applied or rejected, by epoch. The log is written only by the epoch commit (ballast.store.writer).
"""

from __future__ import annotations

from sqlalchemy import func, select

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
