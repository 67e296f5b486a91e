"""SQLAlchemy 2 models of the Ballast metrics DB.

The schema is described in docs/dataplane.md ("Metrics written per epoch") and docs/protocol.md.

Written by the data plane (per-epoch metrics, routing maps, the step-decision log, checkpoints,
heartbeats) and by the control plane (DS2 decisions, plans, plan steps, events). Every change
to these classes ships with an Alembic revision in migrations_db/alembic/versions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.engine.default import DefaultExecutionContext
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# A plan in one of these statuses holds its (job, operator): at most one such plan exists per
# operator (the partial unique index on `plans`). `awaiting_approval`: a manual plan shown to a
# person, not yet approved; `planned`: stored, nothing sent; `emitting`: steps being sent.
OPEN_PLAN_STATUSES = ("awaiting_approval", "planned", "emitting")
_OPEN_PLAN_SQL = "status IN (" + ", ".join(f"'{s}'" for s in OPEN_PLAN_STATUSES) + ")"
NO_EPOCH = -1  # events.dedup_epoch of an event that has no epoch (control-plane events)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Job(Base):
    """A migratable operator of a streaming job, with what is fixed at its first start."""

    __tablename__ = "jobs"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    bins: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)


class RoutingMap(Base):
    """Map version `map_version` of bin -> worker, in force from epoch `epoch` on."""

    __tablename__ = "routing_maps"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    map_version: Mapped[int] = mapped_column(Integer, primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger)
    workers: Mapped[int] = mapped_column(Integer)
    assignment: Mapped[list[Any]]  # assignment[bin] = worker
    created_at: Mapped[datetime]
    plan_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)


class EpochMetrics(Base):
    """One micro-batch of one operator: the DS2 source-side inputs."""

    __tablename__ = "epoch_metrics"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    map_version: Mapped[int] = mapped_column(Integer)
    workers: Mapped[int] = mapped_column(Integer)
    input_rows: Mapped[int] = mapped_column(BigInteger)
    control_rows: Mapped[int] = mapped_column(Integer, default=0)
    batch_ms: Mapped[float] = mapped_column(Float)
    migration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    input_rate: Mapped[float | None] = mapped_column(Float, nullable=True)  # end-offset growth, rows/s
    backlog: Mapped[int | None] = mapped_column(BigInteger, nullable=True)  # end - committed, rows
    end_offsets: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime]
    dead_letters: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class WorkerMetrics(Base):
    """One worker in one epoch: DS2's per-instance observation (useful time excludes waiting)."""

    __tablename__ = "worker_metrics"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    worker: Mapped[int] = mapped_column(Integer, primary_key=True)
    records_in: Mapped[int] = mapped_column(BigInteger)
    records_out: Mapped[int] = mapped_column(BigInteger)
    useful_ms: Mapped[float] = mapped_column(Float)
    wall_ms: Mapped[float] = mapped_column(Float)
    state_keys: Mapped[int] = mapped_column(BigInteger)
    state_bytes: Mapped[int] = mapped_column(BigInteger)
    dead_letters: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")  # folds that raised


class BinMetrics(Base):
    """One bin in one epoch: load and size for skew-aware placement and the migration oracle."""

    __tablename__ = "bin_metrics"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    bin: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[int] = mapped_column(Integer)  # the worker that applied this bin's records
    records: Mapped[int] = mapped_column(BigInteger)
    state_keys: Mapped[int] = mapped_column(BigInteger, default=0)
    state_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    # wall time of the bin's fold in the epoch, µs (0: not measured, a row from before schema 0006)
    fold_us: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")


class EpochTrace(Base):
    """One epoch's trace (ballast.tracing): what the driver and each worker did and what waited
    for what, so a window's critical participation can be computed and exported later. Compact:
    `activities` is a list of [timeline, kind, start_us, end_us], `messages` of [src, dst, kind]
    (indexes into `activities`)."""

    __tablename__ = "epoch_traces"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    started_us: Mapped[int] = mapped_column(BigInteger)  # its first activity's start, µs since the Unix epoch
    activities: Mapped[list[Any]]
    messages: Mapped[list[Any]]


class StepDecision(Base):
    """Durable log of what the job decided at an epoch about a control step (replays reuse it)."""

    __tablename__ = "step_decisions"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    plan_id: Mapped[str] = mapped_column(String(100))
    step: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(20))  # apply | reject | queue | duplicate
    reason: Mapped[str] = mapped_column(Text, default="")
    payload: Mapped[dict[str, Any] | None] = mapped_column(nullable=True)


class StepCheckpoint(Base):
    """Step checkpoint: the completion record of one step (docs/protocol.md): exactly one row per (plan, step)."""

    __tablename__ = "checkpoints"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    plan_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    status: Mapped[str] = mapped_column(String(20))  # applied | rejected | superseded
    applied_epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    applied_at: Mapped[datetime | None] = mapped_column(nullable=True)
    completed_at: Mapped[datetime]
    bins_moved: Mapped[int] = mapped_column(Integer, default=0)
    keys_moved: Mapped[int] = mapped_column(BigInteger, default=0)
    bytes_moved: Mapped[int] = mapped_column(BigInteger, default=0)
    migration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    map_version_after: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")


class Heartbeat(Base):
    """Liveness of a running job, read by the supervisor DAG."""

    __tablename__ = "heartbeats"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    last_epoch: Mapped[int] = mapped_column(BigInteger)
    map_version: Mapped[int] = mapped_column(Integer)
    workers: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime]
    started_at: Mapped[datetime]
    pid: Mapped[int] = mapped_column(Integer)
    # what the cluster can give the job: executors it holds now and the most workers it can run
    executors: Mapped[int | None] = mapped_column(Integer, nullable=True)
    capacity: Mapped[int | None] = mapped_column(Integer, nullable=True)
    host: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20))  # running | stopping | stopped
    # where the driver's Spark UI answers (null: the UI is off); the console links to it
    spark_ui_url: Mapped[str | None] = mapped_column(String(300), nullable=True)


class DriverToken(Base):
    """The fencing token (ownership epoch) of an operator's driver: bumped by every driver start;
    the driver's commits compare-and-write it, so only the newest start commits (docs/dataplane.md)."""

    __tablename__ = "driver_tokens"
    job: Mapped[str] = mapped_column(String(200), primary_key=True)
    operator: Mapped[str] = mapped_column(String(200), primary_key=True)
    token: Mapped[int] = mapped_column(BigInteger)
    taken_at: Mapped[datetime]
    pid: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(200))
    # the longest this driver may legitimately wait out an outage (metrics DB or Kafka) without a
    # heartbeat: the supervisor adds it to the heartbeat timeout before it relaunches
    outage_s: Mapped[float] = mapped_column(Float, default=0.0)
    checked_at: Mapped[datetime | None] = mapped_column(nullable=True)  # the token's last successful check


class Decision(Base):
    """A DS2 decision, "no change" included, with its inputs and reason."""

    __tablename__ = "decisions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(200))
    operator: Mapped[str] = mapped_column(String(200))
    decided_at: Mapped[datetime]
    current_workers: Mapped[int] = mapped_column(Integer)
    proposed_workers: Mapped[int] = mapped_column(Integer)  # DS2's raw answer
    target_workers: Mapped[int] = mapped_column(Integer)  # after the guards
    action: Mapped[str] = mapped_column(String(20))  # scale_up | scale_down | rebalance | no_change
    reason: Mapped[str] = mapped_column(Text)
    inputs: Mapped[dict[str, Any]]
    plan_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    __table_args__ = (Index("ix_decisions_job_time", "job", "operator", "decided_at"),)


class Plan(Base):
    """A migration plan: from one map version to a target map, in steps."""

    __tablename__ = "plans"
    plan_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    job: Mapped[str] = mapped_column(String(200))
    operator: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime]
    strategy: Mapped[str] = mapped_column(String(30))
    # awaiting_approval | planned | emitting (open: OPEN_PLAN_STATUSES) | completed | failed | cancelled
    status: Mapped[str] = mapped_column(String(20))
    source_map_version: Mapped[int] = mapped_column(Integer)
    source_workers: Mapped[int] = mapped_column(Integer)
    target_workers: Mapped[int] = mapped_column(Integer)
    target_assignment: Mapped[list[Any]]
    steps: Mapped[int] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    predicted_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # the run that drives the plan ("dag_id/run_id" or "cli:<host>:<pid>") and when it last showed
    # it is alive (emitting or polling checkpoints): a plan may be taken over only once that lapses
    owner: Mapped[str] = mapped_column(String(250), default="", server_default="")
    owner_seen_at: Mapped[datetime | None] = mapped_column(nullable=True)
    # One open plan per (job, operator), enforced by the DB rather than by a read-then-write in
    # the controller (two runs can both read "no open plan" and both write). A partial unique index
    # and not a lease table: the plan row *is* the lease, so there is no second row to keep in
    # step with it, and closing a plan (completed/failed) releases the operator in the same UPDATE.
    # PostgreSQL and SQLite both support partial indexes.
    __table_args__ = (
        Index("uq_plans_one_open", "job", "operator", unique=True,
              postgresql_where=text(_OPEN_PLAN_SQL), sqlite_where=text(_OPEN_PLAN_SQL)),
    )


class PlanStep(Base):
    """One step of a plan and its emission record (emit is idempotent by plan and step)."""

    __tablename__ = "plan_steps"
    plan_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    step: Mapped[int] = mapped_column(Integer, primary_key=True)
    payload: Mapped[dict[str, Any]]  # the control message, as sent
    effective_at: Mapped[datetime]
    emitted_at: Mapped[datetime | None] = mapped_column(nullable=True)
    kafka_partition: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kafka_offset: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    predicted_ms: Mapped[float | None] = mapped_column(Float, nullable=True)
    # the emitter that claimed the step for sending and when: another emitter does not send it
    # while the claim is fresh (ballast.store.plans.claim_step_emission)
    claimed_by: Mapped[str | None] = mapped_column(String(300), nullable=True)
    claimed_at: Mapped[datetime | None] = mapped_column(nullable=True)


def _dedup_epoch(context: DefaultExecutionContext) -> int:
    """`epoch`, or NO_EPOCH for an event without one (a NULL in a unique key never matches)."""
    epoch = context.get_current_parameters().get("epoch")
    return NO_EPOCH if epoch is None else int(epoch)


class Event(Base):
    """Anything an operator should be able to find later: rejected input, restarts, timeouts."""

    __tablename__ = "events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job: Mapped[str] = mapped_column(String(200))
    operator: Mapped[str] = mapped_column(String(200), default="")
    at: Mapped[datetime]
    level: Mapped[str] = mapped_column(String(10))  # info | warning | error
    kind: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(Text)
    epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # the dedup key's copy of `epoch`, never NULL: with the nullable `epoch` in the key, two equal
    # control-plane events (epoch NULL) were both kept, since NULL never equals NULL
    dedup_epoch: Mapped[int] = mapped_column(BigInteger, default=_dedup_epoch, server_default=str(NO_EPOCH))
    __table_args__ = (UniqueConstraint("job", "operator", "kind", "dedup_epoch", "message", name="uq_events_dedup"),)
