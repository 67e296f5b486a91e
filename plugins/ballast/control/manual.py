"""A migration a person asked for (ballast_migrate): validate the request against the live map,
then plan it like a scheduled one, or take over a plan whose run is gone. `move_mode` (auto,
transfer, precopy, handover) forces every bin's move mode; a forced handover of an operator that
declares no windows is refused with the core's reason before anything is stored."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ballast import policy, store
from ballast.config import JobConfig
from ballast.control.collect import NotReady, current_state
from ballast.control.handoffs import BinLoad, MapState
from ballast.control.place import place
from ballast.control.plan import (
    MoveModeRefused,
    PlanRequest,
    build_plan,
    cost_model,
    declared_window,
    mode_rows,
    store_merge,
    store_plan,
    store_settings,
    store_split,
)
from ballast.control.render import summary_table
from ballast.errors import BallastError
from ballast.options import MOVE_MODES
from ballast.protocol import MAX_TRIGGER_MS, Settings

log = logging.getLogger(__name__)


class InvalidRequest(BallastError, ValueError):
    """A manual migration request that cannot be planned (bad bin, worker, combination, operator held)."""


def manual_target(current: MapState, bins: BinLoad, target_workers: int | None,
                  moves: list[dict[str, Any]] | None) -> tuple[list[int], int]:
    """Target map of a manual request: a worker count (placement decides) or explicit moves.

    Explicit moves keep every other bin where it is; the worker count after is the given one or
    the smallest that holds every named worker (at least the current one).
    """
    cur = list(current.assignment)
    if bool(target_workers) == bool(moves):
        raise InvalidRequest("give either target_workers or a non-empty list of moves, not both and not neither")
    if target_workers:
        return list(place(current.assignment, bins, int(target_workers)).assignment), int(target_workers)
    assert moves is not None
    new = list(cur)
    seen: set[int] = set()
    for i, mv in enumerate(moves):
        b, to = mv.get("bin"), mv.get("to")
        if not isinstance(b, int) or not isinstance(to, int):
            raise InvalidRequest(f"moves[{i}] must be {{'bin': int, 'to': int}}, got {mv!r}")
        if not 0 <= b < len(cur):
            raise InvalidRequest(f"moves[{i}]: bin {b} is outside 0..{len(cur) - 1}")
        if to < 0:
            raise InvalidRequest(f"moves[{i}]: worker {to} is negative")
        if b in seen:
            raise InvalidRequest(f"moves[{i}]: bin {b} is named twice")
        seen.add(b)
        if cur[b] == to:
            raise InvalidRequest(f"moves[{i}]: bin {b} is already on worker {to}")
        new[b] = to
    return new, max(current.workers, max(new) + 1)


def live_map(url: str, cfg: JobConfig, what: str) -> tuple[MapState, BinLoad]:
    """The job's map and bins now, for a request (`what`) a person made; InvalidRequest when a plan
    is open (one at a time per operator) or the job has not reported yet."""
    open_ = store.open_plans(url, cfg.job, cfg.operator)
    if open_:
        raise InvalidRequest(store.conflict_message(open_[-1], what))
    try:
        snap, bins = current_state(url, cfg)
    except NotReady as exc:
        raise InvalidRequest(str(exc)) from exc
    return MapState(snap.map_version, snap.epoch, snap.workers, snap.assignment), bins


def plan_manual(url: str, cfg: JobConfig, params: dict[str, Any]) -> dict[str, Any]:
    """Validate a manual request against the live map, plan it; store it unless dry_run.

    `take_over` (a plan id) instead takes over that open plan of a gone run (`force`: even if its
    owner was seen within the lease); this run then emits and verifies it.
    """
    if params.get("take_over"):
        return take_over_manual(url, cfg, str(params["take_over"]), bool(params.get("force")))
    current, bins = live_map(url, cfg, "this manual migration")
    move_mode = params.get("move_mode") or "auto"
    if move_mode not in MOVE_MODES:
        raise InvalidRequest(f"move_mode must be one of {', '.join(MOVE_MODES)}, got {move_mode!r}")
    one_step_kind = ([k for k in ("split_to", "merge_to") if params.get(k)]
                     + [k for k in Settings.NAMES if params.get(k) is not None])
    if move_mode != "auto" and one_step_kind:
        raise InvalidRequest(f"move_mode {move_mode} forces how bins move; {one_step_kind[0]} moves none by "
                             "choice: leave move_mode at auto (a merge brings its parts together by transfer)")
    if any(params.get(k) is not None for k in Settings.NAMES):
        return _plan_settings(url, cfg, current, params)
    if params.get("split_to"):
        return _plan_split(url, cfg, current, int(params["split_to"]), params)
    if params.get("merge_to"):
        return _plan_merge(url, cfg, current, int(params["merge_to"]), list(bins.bytes), params)
    target, target_workers = manual_target(current, bins, params.get("target_workers"), params.get("moves") or None)
    if not cfg.min_workers <= target_workers <= cfg.max_workers:
        raise InvalidRequest(f"{target_workers} workers is outside this job's bounds [{cfg.min_workers}, "
                             f"{cfg.max_workers}] (min_workers/max_workers in the jobs file)")
    if target == list(current.assignment) and target_workers == current.workers:
        raise InvalidRequest("the request changes nothing: every bin is already where it would go")
    rb = cfg.rebalance
    req = PlanRequest(
        strategy=params.get("strategy") or "auto", order=params.get("order") or rb.order,
        step_size=params.get("step_size"), byte_budget=params.get("byte_budget"),
        gap_seconds=float(params.get("gap_seconds") or 0.0), pause_budget_ms=rb.pause_budget_ms,
        emit_mode=params.get("emit_mode") or rb.emit_mode, move_mode=move_mode, step_budget_s=rb.step_budget_s,
        source="manual", reason=params.get("reason") or "manual migration",
    )
    model = cost_model(url, cfg)
    try:
        plan = build_plan(current, bins, target, target_workers, req, model, declared_window(url, cfg))
    except MoveModeRefused as exc:  # a forced handover the operator's windows do not allow: the core's reason
        raise InvalidRequest(f"move_mode {move_mode}: {exc}") from exc
    rendered = policy.render_plan(plan, model)
    worst, total = model.predict_plan(plan)
    if params.get("dry_run"):
        log.info("DRY RUN — nothing stored, nothing emitted:\n%s", rendered)
        return {"dry_run": True, "plan_id": None, "steps": len(plan.steps), "bins": plan.bins,
                "predicted_ms": total, "predicted_max_pause_ms": worst, "rendered": rendered,
                "modes": mode_rows(plan)}
    try:
        out = store_plan(url, cfg, current, target, plan, req, model).to_dict()
    except store.PlanConflict as exc:  # another run stored one between the check above and now
        raise InvalidRequest(str(exc)) from exc
    out["rendered"] = rendered
    return out


def _plan_split(url: str, cfg: JobConfig, current: MapState, bins: int, params: dict[str, Any]) -> dict[str, Any]:
    """A person's split: raise the bin count to `bins` (one step, nothing moves)."""
    have = len(current.assignment)
    if params.get("target_workers") or params.get("moves") or params.get("merge_to"):
        raise InvalidRequest("split_to raises the bin count alone: leave target_workers, moves and merge_to empty "
                             "(move the parts in a second run)")
    if bins <= have or bins & (bins - 1) or bins > cfg.rebalance.max_bins:
        raise InvalidRequest(f"split_to must be a power of two above the job's {have} bins and at most "
                             f"rebalance.max_bins ({cfg.rebalance.max_bins}), got {bins}")
    rendered = f"split: {have} -> {bins} bins at map v{current.version}; every bin's parts stay on its worker"
    return one_step(cfg, params, rendered, "manual split",
                     lambda req: store_split(url, cfg, current, bins, req).to_dict())


def _plan_merge(url: str, cfg: JobConfig, current: MapState, bins: int, size: list[int],
                params: dict[str, Any]) -> dict[str, Any]:
    """A person's merge: lower the bin count to `bins`. Parts that do not share a worker are moved
    together first (to the worker holding most of their bytes), then one merge step (no key moves)."""
    have = len(current.assignment)
    if params.get("target_workers") or params.get("moves") or params.get("split_to"):
        raise InvalidRequest("merge_to lowers the bin count alone: leave target_workers, moves and split_to empty "
                             "(rebalance in a second run)")
    if bins >= have or bins < 1 or bins & (bins - 1):
        raise InvalidRequest(f"merge_to must be a power of two below the job's {have} bins, got {bins}")
    if bins < current.workers:
        raise InvalidRequest(f"merge_to {bins} leaves fewer bins than the job's {current.workers} workers: scale "
                             "down first, or merge to at least as many bins as workers")
    size = size if len(size) == have else [0] * have
    plan = policy.merge_plan(current.version, current.assignment, current.workers, bins, size)
    moves = [m for s in plan.steps for m in s.moves]
    rendered = (f"merge: {have} -> {bins} bins at map v{current.version}; "
                + (f"step 1 moves {len(moves)} part(s) ({sum(size[m.bin] for m in moves)} B) to the worker holding "
                   "most of their merged bin, then " if moves else "every merged bin's parts share a worker: ")
                + "one merge step, no key moves")
    if params.get("dry_run"):
        log.info("DRY RUN — nothing stored, nothing emitted: %s", rendered)
        return {"dry_run": True, "plan_id": None, "steps": len(plan.steps), "bins": len(moves), "predicted_ms": 0.0,
                "predicted_max_pause_ms": 0.0, "rendered": rendered}
    req = PlanRequest(strategy="all-at-once", emit_mode=params.get("emit_mode") or cfg.rebalance.emit_mode,
                      source="manual", reason=params.get("reason") or "manual merge")
    try:
        out = store_merge(url, cfg, current, bins, size, req).to_dict()
    except store.PlanConflict as exc:
        raise InvalidRequest(str(exc)) from exc
    out["rendered"] = rendered
    return out


def _plan_settings(url: str, cfg: JobConfig, current: MapState, params: dict[str, Any]) -> dict[str, Any]:
    """A person's settings change: the job's trigger interval and/or records per epoch, live (one
    step; the job restarts its streaming query in its own process; nothing moves)."""
    if params.get("target_workers") or params.get("moves") or params.get("split_to") or params.get("merge_to"):
        raise InvalidRequest("trigger_ms and max_records_per_epoch change the job's settings alone: leave "
                             "target_workers, moves, split_to and merge_to empty (migrate in a run of its own)")
    values = {k: params[k] for k in Settings.NAMES if params.get(k) is not None}  # the DAG's params, same names
    for k, v in values.items():
        top = MAX_TRIGGER_MS if k == "trigger_ms" else 2**31 - 1
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
            raise InvalidRequest(f"{k} must be an integer in 0..{top}, got {v!r}")
    settings = Settings(**values)
    rendered = (f"settings at map v{current.version}: "
                + ", ".join(f"{k} -> {v if v or k == 'trigger_ms' else 'no cap'}" for k, v in values.items())
                + "; the job restarts its streaming query in its own process, nothing moves")
    return one_step(cfg, params, rendered, "manual settings change",
                     lambda req: store_settings(url, cfg, current, settings, req).to_dict())


def one_step(cfg: JobConfig, params: dict[str, Any], rendered: str, reason: str,
              store_it: Callable[[PlanRequest], dict[str, Any]]) -> dict[str, Any]:
    """A one-step plan that moves nothing (a split, a settings change, an upgrade): printed on a dry run, else
    stored by `store_it` (a conflicting open plan is the request's error)."""
    if params.get("dry_run"):
        log.info("DRY RUN — nothing stored, nothing emitted: %s", rendered)
        return {"dry_run": True, "plan_id": None, "steps": 1, "bins": 0, "predicted_ms": 0.0,
                "predicted_max_pause_ms": 0.0, "rendered": rendered}
    req = PlanRequest(strategy="all-at-once", emit_mode=params.get("emit_mode") or cfg.rebalance.emit_mode,
                      source="manual", reason=params.get("reason") or reason)
    try:
        out = store_it(req)
    except store.PlanConflict as exc:
        raise InvalidRequest(str(exc)) from exc
    out["rendered"] = rendered
    return out


def take_over_manual(url: str, cfg: JobConfig, plan_id: str, force: bool = False) -> dict[str, Any]:
    """A person's explicit takeover of a plan whose run is gone: this run then emits and verifies it."""
    plan = store.get_plan(url, plan_id)
    if plan is None or (plan.job, plan.operator) != (cfg.job, cfg.operator):
        raise InvalidRequest(f"take_over: plan {plan_id} is not a plan of {cfg.job}/{cfg.operator}")
    try:
        taken = store.take_over_plan(url, plan_id, force=force)
    except store.PlanConflict as exc:
        raise InvalidRequest(str(exc)) from exc
    msg = f"plan {plan_id} ({plan.status}) taken over from {plan.owner or 'unknown'} by {taken.owner}"
    store.add_event(url, cfg.job, cfg.operator, "warning", "plan_taken_over", msg, details={"plan_id": plan_id})
    return {"plan_id": plan_id, "steps": taken.steps, "taken_over": True,
            "rendered": f"{msg}\n{summary_table(url, plan_id)}"}
