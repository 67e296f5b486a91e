"""Plans, their steps, who drives them and who sends each step: the metrics DB's `plans` and
`plan_steps`, with the two rules that make concurrent runs safe.

* One open plan per (job, operator) (`awaiting_approval`, `planned` or `emitting`), enforced by
  a partial unique index (migrations_db.models.Plan), not by a read-then-write here: two runs that
  store a plan at the same moment both pass any check, and exactly one insert wins. The loser
  gets `PlanConflict`, naming the plan in the way, its owner and status, and what to do.
* A plan has an owner, the run that drives it ("dag_id/run_id" in an Airflow task, else
  "cli:<host>:<pid>"), and `owner_seen_at`, refreshed while that run emits or polls checkpoints.
  Another run takes a plan over only explicitly (`take_over_plan`), and only once the owner has
  not been seen for `OWNER_LEASE_S` (or with force=True, when a person knows that run is gone).
* A step is sent by whoever claims it (`claim_step_emission`): one conditional UPDATE records the
  claimant and the time, so a second emitter sees the claim and does not send. A claim left by
  an emitter that crashed between claim and broker ack expires after `CLAIM_TIMEOUT_S` and may
  be claimed again: sending a step twice is then safe, because the data plane treats a second
  copy of a (plan_id, step) as a duplicate (spark_jobs/control.py; docs/protocol.md, "duplicate").

No Airflow import: the triggerer, the tests and a shell use this module too.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from ballast.dbtime import as_utc
from ballast.errors import BallastError
from migrations_db import models as m
from migrations_db.db import session_scope

OPEN_STATUSES = m.OPEN_PLAN_STATUSES
# longer than any pause of a live owner between two signs of life (the emit task waits inline at
# most 30 s, the checkpoint trigger polls every few seconds); shorter than a scheduled rebalance period
OWNER_LEASE_S = 180.0
# longer than one send can take (max_block 15 s + ack timeout 30 s): a claim this old without
# `emitted_at` was left by an emitter that died before recording the broker's ack
CLAIM_TIMEOUT_S = 120.0


def _now() -> datetime:
    return datetime.now(UTC)


def current_owner() -> str:
    """This process's run: "dag_id/run_id" inside an Airflow task (the task runner exports its
    context as AIRFLOW_CTX_* variables), else "cli:<host>:<pid>"."""
    dag, run = os.environ.get("AIRFLOW_CTX_DAG_ID"), os.environ.get("AIRFLOW_CTX_DAG_RUN_ID")
    if dag and run:
        return f"{dag}/{run}"
    return f"cli:{socket.gethostname()}:{os.getpid()}"


def new_claimant(owner: str | None = None) -> str:
    """An emitter's identity in `claimed_by`: its run plus a token (two emitters of one run differ)."""
    return f"{owner or current_owner()}#{uuid.uuid4().hex[:8]}"


class PlanConflict(BallastError, RuntimeError):
    """Another open plan holds the (job, operator); the message names it and says what to do."""

    def __init__(self, message: str, other: PlanRecord | None = None) -> None:
        super().__init__(message)
        self.other = other


@dataclass(frozen=True)
class PlanRecord:
    plan_id: str
    job: str
    operator: str
    created_at: datetime
    strategy: str
    status: str
    source_map_version: int
    source_workers: int
    target_workers: int
    target_assignment: tuple[int, ...]
    steps: int
    params: dict[str, Any]
    predicted_ms: float | None
    reason: str
    finished_at: datetime | None
    owner: str = ""  # "" when stored: the storing process's current_owner()
    owner_seen_at: datetime | None = None

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    def owner_alive(self, now: datetime | None = None, lease_s: float = OWNER_LEASE_S) -> bool:
        """The owner showed a sign of life within the lease (emitting, polling checkpoints)."""
        seen = self.owner_seen_at or self.created_at
        return ((now or _now()) - seen).total_seconds() < lease_s


@dataclass(frozen=True)
class StepRecord:
    plan_id: str
    step: int
    payload: dict[str, Any]
    effective_at: datetime
    emitted_at: datetime | None
    kafka_partition: int | None
    kafka_offset: int | None
    predicted_ms: float | None
    claimed_by: str | None = None
    claimed_at: datetime | None = None

    @property
    def emitted(self) -> bool:
        return self.emitted_at is not None


def _plan(r: m.Plan) -> PlanRecord:
    return PlanRecord(r.plan_id, r.job, r.operator, as_utc(r.created_at), r.strategy, r.status,  # type: ignore[arg-type]
                      r.source_map_version, r.source_workers, r.target_workers,
                      tuple(int(w) for w in r.target_assignment), r.steps, dict(r.params or {}),
                      r.predicted_ms, r.reason or "", as_utc(r.finished_at), r.owner or "", as_utc(r.owner_seen_at))


def conflict_message(other: PlanRecord, wanted: str = "another plan") -> str:
    """What a run that cannot store or drive a plan is told: who holds the operator, and what to do."""
    alive = "alive" if other.owner_alive() else f"not seen for over {OWNER_LEASE_S:.0f}s"
    return (
        f"{other.job}/{other.operator} already has an open plan {other.plan_id} ({other.status}, owner "
        f"{other.owner or 'unknown'}, {alive}, created {other.created_at:%Y-%m-%d %H:%M:%S} UTC), so {wanted} "
        f"cannot start: only one plan per operator may be open. {what_to_do(other)}"
    )


def what_to_do(other: PlanRecord) -> str:
    """The advice for a run that finds an operator held by another run's open plan."""
    return (f"Wait for plan {other.plan_id} to finish; or, if its run is gone, fail it "
            f"(`python -m ballast.control fail {other.plan_id}`) or take it over (trigger ballast_migrate with "
            f"take_over={other.plan_id}; add force=true if its owner was seen within {OWNER_LEASE_S:.0f}s).")


def save_plan(url: str, plan: PlanRecord, steps: list[StepRecord]) -> None:
    """Store a plan and its steps in one transaction (a half-stored plan must never be emitted).

    Raises PlanConflict when another open plan holds the plan's (job, operator).
    """
    owner = plan.owner or current_owner()
    try:
        with session_scope(url) as s:
            s.add(m.Plan(
                plan_id=plan.plan_id, job=plan.job, operator=plan.operator, created_at=plan.created_at,
                strategy=plan.strategy, status=plan.status, source_map_version=plan.source_map_version,
                source_workers=plan.source_workers, target_workers=plan.target_workers,
                target_assignment=list(plan.target_assignment), steps=plan.steps, params=plan.params,
                predicted_ms=plan.predicted_ms, reason=plan.reason, finished_at=plan.finished_at,
                owner=owner, owner_seen_at=plan.owner_seen_at or _now(),
            ))
            s.flush()  # the plan row first: its index decides, before any step row is written
            for st in steps:
                s.add(m.PlanStep(
                    plan_id=st.plan_id, step=st.step, payload=st.payload, effective_at=st.effective_at,
                    emitted_at=st.emitted_at, kafka_partition=st.kafka_partition, kafka_offset=st.kafka_offset,
                    predicted_ms=st.predicted_ms,
                ))
    except IntegrityError as exc:
        others = [p for p in open_plans(url, plan.job, plan.operator) if p.plan_id != plan.plan_id]
        if plan.status in OPEN_STATUSES and others:
            raise PlanConflict(conflict_message(others[0], f"plan {plan.plan_id} (owner {owner})"),
                               others[0]) from exc
        raise


def get_plan(url: str, plan_id: str) -> PlanRecord | None:
    with session_scope(url) as s:
        r = s.get(m.Plan, plan_id)
        return _plan(r) if r else None


def plan_steps(url: str, plan_id: str) -> list[StepRecord]:
    with session_scope(url) as s:
        rows = s.scalars(select(m.PlanStep).where(m.PlanStep.plan_id == plan_id).order_by(m.PlanStep.step)).all()
        return [StepRecord(r.plan_id, r.step, dict(r.payload), as_utc(r.effective_at), as_utc(r.emitted_at),  # type: ignore[arg-type]
                           r.kafka_partition, r.kafka_offset, r.predicted_ms, r.claimed_by, as_utc(r.claimed_at))
                for r in rows]


def open_plans(url: str, job: str, operator: str) -> list[PlanRecord]:
    """Plans not finished (awaiting approval, planned or emitting): the DB allows at most one."""
    with session_scope(url) as s:
        rows = s.scalars(
            select(m.Plan).where(m.Plan.job == job, m.Plan.operator == operator, m.Plan.status.in_(OPEN_STATUSES))
            .order_by(m.Plan.created_at)
        ).all()
        return [_plan(r) for r in rows]


def recent_plans(url: str, limit: int = 50, job: str | None = None) -> list[PlanRecord]:
    with session_scope(url) as s:
        q = select(m.Plan).order_by(m.Plan.created_at.desc()).limit(limit)
        if job:
            q = q.where(m.Plan.job == job)
        return [_plan(r) for r in s.scalars(q).all()]


def latest_plan(url: str, job: str, operator: str) -> PlanRecord | None:
    """The operator's newest plan, whatever its status."""
    with session_scope(url) as s:
        r = s.scalars(select(m.Plan).where(m.Plan.job == job, m.Plan.operator == operator)
                      .order_by(m.Plan.created_at.desc()).limit(1)).first()
        return _plan(r) if r else None


def last_finished_plan(url: str, job: str, operator: str) -> PlanRecord | None:
    with session_scope(url) as s:
        r = s.scalars(
            select(m.Plan).where(m.Plan.job == job, m.Plan.operator == operator, m.Plan.status == "completed")
            .order_by(m.Plan.finished_at.desc()).limit(1)
        ).first()
        return _plan(r) if r else None


def touch_owner(url: str, plan_id: str) -> None:
    """The owner is alive: it emits or polls the plan's checkpoints (renews its lease)."""
    with session_scope(url) as s:
        s.execute(update(m.Plan).where(m.Plan.plan_id == plan_id, m.Plan.status.in_(OPEN_STATUSES))
                  .values(owner_seen_at=_now()))


def take_over_plan(url: str, plan_id: str, new_owner: str | None = None, *, force: bool = False,
                   lease_s: float = OWNER_LEASE_S) -> PlanRecord:
    """Make `new_owner` (default: this run) drive an open plan whose owner is gone.

    Explicit on purpose: nothing takes a plan over as a side effect of reading it. The owner is
    gone when it has not been seen for `lease_s`; `force` skips that check (a person who knows
    the run was killed). One conditional UPDATE: two runs taking over at once, one wins.
    """
    new_owner = new_owner or current_owner()
    now = _now()
    cur = get_plan(url, plan_id)
    if cur is None:
        raise PlanConflict(f"plan {plan_id} is not in the metrics DB; nothing to take over")
    if not cur.is_open:
        raise PlanConflict(f"plan {plan_id} is already {cur.status}; plan a new migration instead")
    if cur.owner == new_owner:
        return cur
    if not force and cur.owner_alive(now, lease_s):
        raise PlanConflict(f"plan {plan_id} is driven by {cur.owner or 'unknown'}, seen "
                           f"{(now - (cur.owner_seen_at or cur.created_at)).total_seconds():.0f}s ago (lease "
                           f"{lease_s:.0f}s): wait for that run, or stop it first and take over with force")
    with session_scope(url) as s:
        won = s.execute(
            update(m.Plan).where(m.Plan.plan_id == plan_id, m.Plan.owner == cur.owner,
                                 m.Plan.status.in_(OPEN_STATUSES))
            .values(owner=new_owner, owner_seen_at=now)
        ).rowcount == 1  # type: ignore[attr-defined]
    if not won:
        raise PlanConflict(f"plan {plan_id} changed owner or status while {new_owner} was taking it over; "
                           "look at it again before retrying")
    return get_plan(url, plan_id)  # type: ignore[return-value]


def claim_step_emission(url: str, plan_id: str, step: int, payload: dict[str, Any], effective_at: datetime,
                        claimant: str | None = None, claim_timeout_s: float = CLAIM_TIMEOUT_S) -> bool:
    """Claim a not-yet-emitted step for sending, rewriting its payload (fresh issued/effective times).

    True: the caller, and only it, sends the step now. False: the step was emitted, or another
    emitter holds a fresh claim on it: the caller must not send it.
    """
    now = _now()
    step_row = m.PlanStep
    with session_scope(url) as s:
        res = s.execute(
            update(step_row)
            .where(step_row.plan_id == plan_id, step_row.step == step, step_row.emitted_at.is_(None),
                   or_(step_row.claimed_at.is_(None),
                       step_row.claimed_at < now - timedelta(seconds=claim_timeout_s)))
            .values(payload=payload, effective_at=effective_at, claimed_by=claimant or new_claimant(),
                    claimed_at=now)
        )
        return bool(res.rowcount == 1)  # type: ignore[attr-defined]


def release_step_claim(url: str, plan_id: str, step: int, claimant: str) -> None:
    """Give a claim back after a send the broker did not acknowledge: a retry may claim it at once."""
    with session_scope(url) as s:
        s.execute(update(m.PlanStep).where(m.PlanStep.plan_id == plan_id, m.PlanStep.step == step,
                                           m.PlanStep.claimed_by == claimant, m.PlanStep.emitted_at.is_(None))
                  .values(claimed_by=None, claimed_at=None))


def mark_step_emitted(url: str, plan_id: str, step: int, at: datetime, partition: int, offset: int) -> None:
    with session_scope(url) as s:
        s.execute(
            update(m.PlanStep).where(m.PlanStep.plan_id == plan_id, m.PlanStep.step == step)
            .values(emitted_at=at, kafka_partition=partition, kafka_offset=offset)
        )


def set_plan_status(url: str, plan_id: str, status: str, reason: str | None = None,
                    finished: bool = False) -> None:
    """Change a plan's status; moving a closed plan back to an open status can raise PlanConflict."""
    values: dict[str, Any] = {"status": status}
    if reason is not None:
        values["reason"] = reason
    if finished:
        values["finished_at"] = _now()
    if status in OPEN_STATUSES:
        values["owner_seen_at"] = _now()
    try:
        with session_scope(url) as s:
            s.execute(update(m.Plan).where(m.Plan.plan_id == plan_id).values(**values))
    except IntegrityError as exc:
        plan = get_plan(url, plan_id)
        others = [p for p in open_plans(url, plan.job, plan.operator) if p.plan_id != plan_id] if plan else []
        if others:
            raise PlanConflict(conflict_message(others[0], f"plan {plan_id} ({status})"), others[0]) from exc
        raise
