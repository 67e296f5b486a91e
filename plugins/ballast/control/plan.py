"""Stage 4, plan: the planner's steps from the current map to a placement, checked to compose to
it, then stored with every step's control message in one transaction before anything is sent.

Storing is where the one-open-plan-per-operator rule bites (ballast.store.plans): a run that
loses gets PlanConflict naming the plan in the way.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from ballast import policy, store
from ballast.bin_maps import merge_assignment, split_assignment
from ballast.code_version import CodeVersion
from ballast.config import JobConfig
from ballast.control.handoffs import BinLoad, MapState, StoredPlan
from ballast.errors import BallastError
from ballast.options import EmitMode, Order, Strategy
from ballast.protocol import ControlStep, Move, Settings

log = logging.getLogger(__name__)


class PlanFailed(BallastError, RuntimeError):
    """A plan cannot complete; the message says why and what the operator should do."""


@dataclass(frozen=True)
class PlanRequest:
    """Everything that shapes a plan; the scheduled run fills it from config, the manual one from Params."""

    strategy: Strategy
    order: Order = "hot-first"
    step_size: int | None = None
    byte_budget: int | None = None
    gap_seconds: float = 0.0
    pause_budget_ms: float = 200.0
    emit_mode: EmitMode = "flow-control"
    source: str = "rebalance"  # rebalance | manual
    reason: str = ""
    decision_id: int | None = None


def new_plan_id(job: str, now: datetime | None = None) -> str:
    ts = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S")
    return f"{job[:60]}-{ts}-{uuid.uuid4().hex[:6]}"


def cost_model(url: str, cfg: JobConfig) -> policy.CostModel:
    """Migration cost model fitted on this job's own applied checkpoints (defaults until 3 exist)."""
    samples = [policy.CheckpointSample(c.bytes_moved, c.keys_moved, c.bins_moved, c.migration_ms)
               for c in store.recent_checkpoints(url, cfg.job, cfg.operator)]
    return policy.fit_cost_model(samples, epoch_ms=1000.0 * cfg.rebalance.batch_budget_s)


def build_plan(current: MapState, bins: BinLoad, target: Sequence[int], target_workers: int,
               req: PlanRequest, model: policy.CostModel) -> policy.MigrationPlan:
    """The planner's steps from the current map to `target` (no DB write)."""
    plan = policy.plan_migration(
        list(current.assignment), current.version, list(target), current.workers, target_workers,
        list(bins.bytes), list(bins.load), strategy=req.strategy, order=req.order,
        step_size=req.step_size, byte_budget=req.byte_budget, gap_s=req.gap_seconds, bin_keys=list(bins.keys),
        cost_model=model, pause_budget_ms=req.pause_budget_ms,
    )
    # the steps must compose to the target: never store a plan that would not
    state = list(current.assignment)
    for s in plan.steps:
        state = policy.apply_moves(state, s.moves)
    if state != list(target):
        raise PlanFailed("internal error: the planner's steps do not compose to the target map; nothing stored")
    return plan


def store_split(url: str, cfg: JobConfig, current: MapState, bins: int, req: PlanRequest) -> StoredPlan:
    """Store the one-step plan that raises the bin count to `bins` (nothing moves); its target map
    is `ballast.bin_maps.split_assignment`'s, the rule the job applies."""
    plan = policy.split_plan(current.version, current.assignment, current.workers, bins)
    return store_plan(url, cfg, current, split_assignment(current.assignment, bins), plan, req, cost_model(url, cfg))


def store_merge(url: str, cfg: JobConfig, current: MapState, bins: int, size: list[int] | None,
                req: PlanRequest) -> StoredPlan:
    """Store the plan that lowers the bin count to `bins`: the moves that bring each merged bin's
    parts to one worker (`ballast.policy.merge_plan`), then the merge step; its target map is
    `ballast.bin_maps.merge_assignment`'s of the map after those moves, the rule the job applies."""
    plan = policy.merge_plan(current.version, current.assignment, current.workers, bins, size)
    moved = policy.apply_moves(current.assignment, [m for s in plan.steps for m in s.moves])
    return store_plan(url, cfg, current, merge_assignment(moved, bins), plan, req, cost_model(url, cfg))


def store_settings(url: str, cfg: JobConfig, current: MapState, settings: Settings, req: PlanRequest) -> StoredPlan:
    """Store the one-step plan that changes the job's settings (its map stays as it is)."""
    plan = policy.settings_plan(current.version, current.workers, settings)
    return store_plan(url, cfg, current, current.assignment, plan, req, cost_model(url, cfg))


def store_upgrade(url: str, cfg: JobConfig, current: MapState, code: CodeVersion, req: PlanRequest) -> StoredPlan:
    """Store the one-step plan that puts another version of the job's processor in force (its map stays)."""
    plan = policy.upgrade_plan(current.version, current.workers, code)
    return store_plan(url, cfg, current, current.assignment, plan, req, cost_model(url, cfg))


def store_plan(url: str, cfg: JobConfig, current: MapState, target: Sequence[int], plan: policy.MigrationPlan,
               req: PlanRequest, model: policy.CostModel, now: datetime | None = None) -> StoredPlan:
    """Store plan + steps (payload = the control message) in one transaction, owned by this run."""
    now = now or datetime.now(UTC)
    plan_id = new_plan_id(cfg.job, now)
    worst, total = model.predict_plan(plan)
    n = len(plan.steps)
    params = {"strategy": plan.strategy, "requested_strategy": req.strategy, "order": plan.order,
              "step_size": req.step_size, "byte_budget": req.byte_budget, "gap_seconds": req.gap_seconds,
              "emit_mode": req.emit_mode, "source": req.source, "decision_id": req.decision_id,
              "knobs": plan.knobs, "predicted_max_pause_ms": worst, "cost_model_samples": model.samples}
    steps = []
    for s in plan.steps:
        msg = ControlStep(
            job=cfg.job, operator=cfg.operator, plan_id=plan_id, step=s.step, steps=n,
            kind=s.kind, moves=tuple(Move(mv.bin, mv.src, mv.dst) for mv in s.moves),  # type: ignore[arg-type]
            workers=s.workers, map_version=s.map_version, issued_at=now,
            effective_at=now + timedelta(seconds=s.effective_offset_s), reason=req.reason[:500], bins=s.bins_after,
            settings=s.settings, code=s.code,
        )
        steps.append(store.StepRecord(plan_id, s.step, msg.to_dict(), msg.effective_at, None, None, None,
                                     model.predict_step(s)))
    rec = store.PlanRecord(
        plan_id=plan_id, job=cfg.job, operator=cfg.operator, created_at=now, strategy=plan.strategy,
        status="planned", source_map_version=current.version, source_workers=current.workers,
        target_workers=plan.to_workers, target_assignment=tuple(target), steps=n, params=params,
        predicted_ms=total, reason=req.reason, finished_at=None, owner=store.current_owner(),
    )
    store.save_plan(url, rec, steps)
    if req.decision_id is not None:
        store.link_decision(url, req.decision_id, plan_id)
    store.add_event(url, cfg.job, cfg.operator, "info", "plan",
                   f"plan {plan_id}: {plan.strategy}, {n} step(s), {plan.bins} bin(s), "
                   f"workers {plan.from_workers}->{plan.to_workers} (owner {rec.owner})",
                   details={"plan_id": plan_id})
    log.info("stored plan %s (owner %s)\n%s", plan_id, rec.owner, policy.render_plan(plan, model))
    return StoredPlan(plan_id, n, plan.bins, plan.bytes, plan.strategy, total, worst, req.emit_mode)
