"""Step checkpoints (completion records of plan steps) as the control plane reads them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select

from ballast.dbtime import as_utc
from ballast.protocol import Settings
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


def _applied_payloads(url: str, job: str, operator: str) -> tuple[dict[str, Any] | None, list[Any]]:
    """The job row's start configuration and the control messages of the steps it applied since the
    row was made, in the order it applied them; (None, []) before the job's first start.

    Only steps applied since the row was made count: a row is made again when a deployment under
    the same name starts on a new checkpoint (its old row deleted, spark_jobs.binding.db_problem),
    and that job's journal holds none of the old deployment's settings or versions."""
    with session_scope(url) as s:
        row = s.get(m.Job, (job, operator))
        if row is None:
            return None, []
        steps = s.execute(
            select(m.PlanStep.payload)
            .join(m.StepCheckpoint, (m.StepCheckpoint.plan_id == m.PlanStep.plan_id)
                  & (m.StepCheckpoint.step == m.PlanStep.step))
            .where(m.StepCheckpoint.job == job, m.StepCheckpoint.operator == operator,
                   m.StepCheckpoint.status == "applied", m.StepCheckpoint.applied_at >= row.created_at)
            .order_by(m.StepCheckpoint.applied_epoch)).scalars().all()
        return dict(row.config or {}), list(steps)


def job_in_force(url: str, job: str, operator: str) -> tuple[int | None, int | None, dict[str, str] | None]:
    """What the job runs with, from one read of its applied steps: the trigger interval, the records-per-epoch
    cap (None: no cap) — its last start's command line (the job row) under every settings step it applied,
    in order (the job's own rule: ballast.protocol.Settings.over) — and the processor version the applied
    upgrade steps put in force ({"version", "ref"}; None while the command line's runs). (None, None, None)
    before the job's first start."""
    config, steps = _applied_payloads(url, job, operator)
    if config is None:
        return None, None, None
    now = Settings(config.get("trigger_ms"), config.get("max_offsets_per_trigger"))  # the command line
    version = None
    for payload in steps:
        if not isinstance(payload, dict):
            continue
        if payload.get("kind") == "settings":
            now = Settings(**payload.get("settings", {})).over(now)
        elif payload.get("kind") == "upgrade" and isinstance(payload.get("code"), dict):
            version = {"version": str(payload["code"].get("version")), "ref": str(payload["code"].get("ref"))}
    return now.trigger_ms, now.max_records_per_epoch or None, version


def job_settings(url: str, job: str, operator: str) -> tuple[int | None, int | None]:
    """The trigger interval and the records-per-epoch cap the job runs with (`job_in_force`)."""
    return job_in_force(url, job, operator)[:2]
