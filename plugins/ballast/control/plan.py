"""Stage 4, plan: the planner's steps from the current map to a placement, checked to compose to
it, then stored with every step's control message in one transaction before anything is sent.

Storing is where the one-open-plan-per-operator rule bites (ballast.store.plans): a run that
loses gets PlanConflict naming the plan in the way.

Each moving bin moves by transfer, pre-copy or handover (docs/handover.md, "Choosing a move mode per
bin"): the cost model's a and b, the job's pause and step budgets, and the windows its operator
declares (the job row's config, `declared_window`) decide, unless a manual run forces a mode; every
stored step carries its mode's flag, and the plan's params each bin's mode and why.
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
from ballast.options import EmitMode, MoveMode, Order, Strategy
from ballast.protocol import ControlStep, Move, Settings

log = logging.getLogger(__name__)


class PlanFailed(BallastError, RuntimeError):
    """A plan cannot complete; the message says why and what the operator should do."""


class MoveModeRefused(BallastError, ValueError):
    """A forced move mode the job cannot take (a handover of an operator without windows): the core's reason."""


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
    move_mode: MoveMode = "auto"  # auto: per bin by the cost model; else forced for every bin (a manual run)
    step_budget_s: float = 60.0  # longest wait of a handover step (rebalance.step_budget_s)
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


def declared_window(url: str, cfg: JobConfig) -> policy.DeclaredWindow | None:
    """The windows the job's operator declares, from its job row (None: none declared, or a job row
    written before it carried them: its bins move by transfer or pre-copy)."""
    config = store.JobStore(url, cfg.job, cfg.operator).job_config() or {}
    return policy.DeclaredWindow.from_config(config.get("window"))


def move_modes(current: MapState, bins: BinLoad, target: Sequence[int], req: PlanRequest, model: policy.CostModel,
               window: policy.DeclaredWindow | None) -> policy.MoveModes:
    """Each moving bin's mode and why; MoveModeRefused for a forced mode the operator cannot take."""
    moving = [b for b, (c, t) in enumerate(zip(current.assignment, target)) if c != t]
    n = len(current.assignment)
    size = list(bins.bytes) if len(bins.bytes) == n else [0] * n
    keys = list(bins.keys) if len(bins.keys) == n else [0] * n
    per_epoch = [x / max(1, bins.epochs) for x in bins.load] if len(bins.load) == n else [0.0] * n
    budgets = policy.ModeBudgets(model.a_ms, model.b_ms_per_byte, req.pause_budget_ms, req.step_budget_s,
                                 model.epoch_ms / 1000.0)
    try:
        return policy.choose_bin_modes(moving, size, keys, per_epoch, window, budgets, req.move_mode)
    except ValueError as exc:
        raise MoveModeRefused(str(exc)) from exc


def build_plan(current: MapState, bins: BinLoad, target: Sequence[int], target_workers: int,
               req: PlanRequest, model: policy.CostModel, window: policy.DeclaredWindow | None = None,
               ) -> policy.MigrationPlan:
    """The planner's steps from the current map to `target`, each bin by its move mode (no DB write)."""
    plan = policy.plan_migration(
        list(current.assignment), current.version, list(target), current.workers, target_workers,
        list(bins.bytes), list(bins.load), strategy=req.strategy, order=req.order,
        step_size=req.step_size, byte_budget=req.byte_budget, gap_s=req.gap_seconds, bin_keys=list(bins.keys),
        cost_model=model, pause_budget_ms=req.pause_budget_ms,
        modes=move_modes(current, bins, target, req, model, window),
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
              "knobs": plan.knobs, "predicted_max_pause_ms": worst, "cost_model_samples": model.samples,
              "move_mode": req.move_mode, "step_budget_s": req.step_budget_s, "move_modes": mode_rows(plan)}
    steps = []
    for s in plan.steps:
        msg = ControlStep(
            job=cfg.job, operator=cfg.operator, plan_id=plan_id, step=s.step, steps=n,
            kind=s.kind, moves=tuple(Move(mv.bin, mv.src, mv.dst) for mv in s.moves),  # type: ignore[arg-type]
            workers=s.workers, map_version=s.map_version, issued_at=now,
            effective_at=now + timedelta(seconds=s.effective_offset_s), reason=req.reason[:500], bins=s.bins_after,
            settings=s.settings, code=s.code, precopy=s.mode == "precopy", handover=s.mode == "handover",
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


def mode_rows(plan: policy.MigrationPlan) -> list[dict[str, object]]:
    """Each moving bin's mode and why, as the plan's params and a dry run's output carry them."""
    return [{"bin": c.bin, "mode": c.mode, "reason": c.reason} for c in plan.modes]
