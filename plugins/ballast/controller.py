"""The control-plane pipeline the DAG tasks call: collect → evaluate → place → plan → emit → await → verify.

Pure of Airflow so a test (or a shell) can drive a whole rebalance against a real broker and
metrics DB; each stage takes and returns JSON-able dicts because that is what crosses task
boundaries as XCom. Every decision is stored, "no change" included; every plan and step is
stored before anything is emitted, so an interrupted run resumes from the DB, never from memory.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

from ballast import policy
from ballast import repository as repo
from ballast.config import JobConfig
from ballast.protocol import ControlStep, Move

log = logging.getLogger(__name__)

GUARD_STATE_KEY = "guard_state"


class NotReady(RuntimeError):
    """Nothing to decide yet (job not running, no metrics); not an error of the controller."""


class PlanFailed(RuntimeError):
    """A plan cannot complete; the message says why and what the operator should do."""


class InvalidRequest(ValueError):
    """A manual migration request that cannot be planned (bad bin, worker, combination)."""


def _now() -> datetime:
    return datetime.now(timezone.utc)


def new_plan_id(job: str, now: datetime | None = None) -> str:
    ts = (now or _now()).strftime("%Y%m%dT%H%M%S")
    return f"{job[:60]}-{ts}-{uuid.uuid4().hex[:6]}"


# ------------------------------------------------------------------------------------ collect


def collect(url: str, cfg: JobConfig) -> dict[str, Any]:
    """What the job looks like now: its map, the metrics window, per-bin load/bytes, open plans.

    An unfinished plan (planned/emitting) takes precedence: the rebalance resumes it instead of
    deciding anew, because its steps expect map versions a new plan would race with.
    """
    rb = cfg.rebalance
    open_ = repo.open_plans(url, cfg.job, cfg.operator)
    current = repo.latest_map(url, cfg.job, cfg.operator)
    if open_:
        return {"status": "resume", "plan_id": open_[-1].plan_id,
                "reason": f"plan {open_[-1].plan_id} is unfinished ({open_[-1].status}); resuming it"}
    if current is None:
        raise NotReady(
            f"job {cfg.job}/{cfg.operator} has no routing map in the metrics DB yet: it has not run. "
            "Start it with the ballast_supervise DAG."
        )
    epochs = [e for e in repo.epoch_window(url, cfg.job, cfg.operator, rb.window_epochs)
              if e.workers == current.workers and e.map_version == current.map_version]
    if not epochs:
        raise NotReady(
            f"no epoch of {cfg.job}/{cfg.operator} ran under the current map v{current.map_version} yet; "
            "waiting for metrics"
        )
    workers = repo.worker_window(url, cfg.job, cfg.operator, [e.epoch for e in epochs])
    stats = repo.bin_stats(url, cfg.job, cfg.operator, current.bins, rb.window_epochs)
    return {
        "status": "ready",
        "map": {"version": current.map_version, "epoch": current.epoch, "workers": current.workers,
                "assignment": list(current.assignment)},
        "epochs": [{"epoch": e.epoch, "input_rows": e.input_rows, "batch_ms": e.batch_ms,
                    "input_rate": e.input_rate or 0.0, "backlog": e.backlog or 0} for e in epochs],
        "workers": [{"epoch": w.epoch, "worker": w.worker, "records_in": w.records_in,
                     "records_out": w.records_out, "useful_ms": w.useful_ms, "wall_ms": w.wall_ms}
                    for w in workers],
        "bins": {"load": list(stats.load), "bytes": list(stats.bytes), "keys": list(stats.keys),
                 "epochs": stats.epochs},
        "latest_epoch": epochs[-1].epoch,
    }


# ------------------------------------------------------------------------------------ evaluate


def _guard_config(cfg: JobConfig, capacity: int | None = None) -> policy.GuardConfig:
    """The jobs file's bounds; the upper one also capped by what the cluster can run (the job
    reports its cluster's capacity in its heartbeat), never below the lower one."""
    rb = cfg.rebalance
    upper = cfg.max_workers if not capacity else max(cfg.min_workers, min(cfg.max_workers, capacity))
    return policy.GuardConfig(
        min_workers=cfg.min_workers, max_workers=upper, warmup_s=rb.warmup_s,
        warmup_epochs=rb.warmup_epochs, activation=rb.activation, target_utilization=rb.target_utilization,
        utilization_band=rb.utilization_band, scale_down_delay_s=rb.scale_down_delay_s,
    )


def _guard_state(url: str, cfg: JobConfig) -> policy.GuardState:
    """Guard state lives in the latest decision's inputs; warm-up counts from the end of the last plan."""
    last = repo.latest_decision(url, cfg.job, cfg.operator)
    state = policy.GuardState.from_dict(last.inputs.get(GUARD_STATE_KEY) if last else None)
    done = repo.last_finished_plan(url, cfg.job, cfg.operator)
    if done and done.finished_at:
        fin = done.finished_at.timestamp()
        if state.last_change_at is None or fin > state.last_change_at:
            state.last_change_at = fin
            cps = repo.checkpoints(url, done.plan_id)
            epochs = [c.applied_epoch for c in cps.values() if c.applied_epoch is not None]
            if epochs:
                state.last_change_epoch = max(epochs)
    return state


def _json_safe(value: Any) -> Any:
    """inf/nan -> None: DS2 reports infinite utilization when the batch overhead alone fills the
    budget, and neither XCom nor PostgreSQL's JSON accept non-finite numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def evaluate(url: str, cfg: JobConfig, snap: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """DS2 + guards (+ a skew check at equal worker count); stores the decision, "no change" too."""
    now = now or _now()
    rb = cfg.rebalance
    cur = int(snap["map"]["workers"])
    flow = policy.Dataflow.chain(cfg.input_topic, [(cfg.operator, cur)])
    rows = [policy.WorkerEpochMetrics(cfg.operator, w["epoch"], w["worker"], w["records_in"], w["records_out"],
                                      w["useful_ms"], w["wall_ms"]) for w in snap["workers"]]
    epochs = [policy.EpochMetrics(e["epoch"], e["input_rows"], e["batch_ms"], e["input_rate"], e["backlog"])
              for e in snap["epochs"]]
    # DS2 sizes for the same utilization the guards' band is centred on
    res = policy.evaluate(flow, rows, epochs, model=rb.model, batch_budget_s=rb.batch_budget_s,  # type: ignore[arg-type]
                          catch_up_s=rb.catch_up_s, aggregation=rb.aggregation,  # type: ignore[arg-type]
                          target_utilization=rb.target_utilization)
    target = res.targets[cfg.operator]
    rates = policy.operator_rates(rows, rb.aggregation)  # type: ignore[arg-type]
    true_rate = rates[cfg.operator].true_rate if cfg.operator in rates else None
    obs = policy.Observation(now_s=now.timestamp(), epoch=int(snap["latest_epoch"]), current_workers=cur,
                             proposed_workers=target.parallelism, utilization=res.utilization, true_rate=true_rate)
    state = _guard_state(url, cfg)
    hb = repo.heartbeat(url, cfg.job, cfg.operator)
    decision, new_state = policy.evaluate_guards(obs, state, _guard_config(cfg, hb.capacity if hb else None))
    action, reason, target_workers = decision.action, decision.reason, decision.target_workers

    # "no change" alone would hide a growing backlog: say why and what the operator can do
    diagnosis = res.note if not res.feasible else None
    if diagnosis is None and action == "no_change":
        diagnosis = policy.bottleneck_outside_operators(epochs, res.utilization,
                                                        below=rb.target_utilization - rb.utilization_band)
    if diagnosis:
        reason = f"{reason}; {diagnosis}"
        log.warning("job %s/%s: %s (set rebalance.batch_budget_s and the job's trigger interval together)",
                    cfg.job, cfg.operator, diagnosis)
    inputs: dict[str, Any] = {**decision.inputs, **{f"ds2.{k}": v for k, v in res.inputs.items()},
                              "ds2.model": res.model, "ds2.feasible": res.feasible,
                              "ds2.advised_budget_s": res.advised_budget_s, "diagnosis": diagnosis,
                              "ds2.note": res.note or target.note, "map_version": snap["map"]["version"],
                              "window_epochs": [e["epoch"] for e in snap["epochs"]]}
    if action == "no_change" and cur > 1 and sum(snap["bins"]["load"]) > 0:
        old = snap["map"]["assignment"]
        new = policy.place(old, cur, snap["bins"]["load"], snap["bins"]["bytes"])
        before = policy.placement_stats(old, old, cur, snap["bins"]["load"])
        after = policy.placement_stats(old, new, cur, snap["bins"]["load"], snap["bins"]["bytes"])
        inputs.update({"skew_before": before.max_over_mean, "skew_after": after.max_over_mean})
        if before.max_over_mean > 1 + rb.skew_threshold and after.max_over_mean < before.max_over_mean - 0.05:
            action = "rebalance"
            reason = (f"{reason}; but worker loads are skewed (max/mean {before.max_over_mean:.2f} > "
                      f"{1 + rb.skew_threshold:.2f}): rebalance bins to {after.max_over_mean:.2f}")
    inputs[GUARD_STATE_KEY] = new_state.to_dict()
    decision_id = repo.save_decision(url, cfg.job, cfg.operator, current_workers=cur,
                                     proposed_workers=decision.proposed_workers, target_workers=target_workers,
                                     action=action, reason=reason, inputs=_json_safe(inputs), at=now)
    log.info("decision #%d for %s/%s: %s (%d -> %d workers; DS2 proposes %d, utilization %.2f): %s",
             decision_id, cfg.job, cfg.operator, action, cur, target_workers, decision.proposed_workers,
             res.utilization, reason)
    return _json_safe({"decision_id": decision_id, "action": action, "current_workers": cur,
                       "proposed_workers": decision.proposed_workers, "target_workers": target_workers,
                       "reason": reason, "utilization": res.utilization})


# ------------------------------------------------------------------------------------ place


def place(snap: dict[str, Any], target_workers: int) -> dict[str, Any]:
    """Target map for `target_workers`, balancing measured per-bin load, moving few bins/bytes."""
    old = snap["map"]["assignment"]
    load, size = snap["bins"]["load"], snap["bins"]["bytes"]
    new = policy.place(old, target_workers, load, size)
    st = policy.placement_stats(old, new, target_workers, load, size)
    log.info("placement for %d workers: %d bin(s), %s bytes move; max/mean load %.2f (lower bound %.2f)",
             target_workers, st.bins_moved, f"{st.bytes_moved:,}", st.max_over_mean,
             st.lower_bound / (sum(load) / target_workers) if sum(load) > 0 else 1.0)
    return {"target_workers": target_workers, "assignment": new, "bins_moved": st.bins_moved,
            "bytes_moved": st.bytes_moved, "max_over_mean": st.max_over_mean}


# ------------------------------------------------------------------------------------ plan


def cost_model(url: str, cfg: JobConfig) -> policy.CostModel:
    """Migration cost model fitted on this job's own applied checkpoints (defaults until 3 exist)."""
    samples = [policy.CheckpointSample(c.bytes_moved, c.keys_moved, c.bins_moved, c.migration_ms)
               for c in repo.recent_checkpoints(url, cfg.job, cfg.operator)]
    epoch_ms = 1000.0 * cfg.rebalance.batch_budget_s
    return policy.fit_cost_model(samples, epoch_ms=epoch_ms)


@dataclass(frozen=True)
class PlanRequest:
    """Everything that shapes a plan; the scheduled run fills it from config, the manual one from Params."""

    strategy: str
    order: str = "hot-first"
    step_size: int | None = None
    byte_budget: int | None = None
    gap_seconds: float = 0.0
    pause_budget_ms: float = 200.0
    emit_mode: str = "flow-control"
    source: str = "rebalance"  # rebalance | manual
    reason: str = ""
    decision_id: int | None = None


def build_plan(cfg: JobConfig, snap: dict[str, Any], target: Sequence[int], target_workers: int,
               req: PlanRequest, model: policy.CostModel) -> policy.Plan:
    """The planner's steps from the current map to `target` (no DB write)."""
    m = snap["map"]
    plan = policy.plan_migration(
        m["assignment"], m["version"], target, m["workers"], target_workers,
        snap["bins"]["bytes"], snap["bins"]["load"],
        strategy=req.strategy, order=req.order, step_size=req.step_size,  # type: ignore[arg-type]
        byte_budget=req.byte_budget, gap_s=req.gap_seconds, bin_keys=snap["bins"]["keys"],
        cost_model=model, pause_budget_ms=req.pause_budget_ms,
    )
    # the steps must compose to the target: never store a plan that would not
    state = list(m["assignment"])
    for s in plan.steps:
        state = policy.apply_moves(state, s.moves)
    if state != list(target):
        raise PlanFailed("internal error: the planner's steps do not compose to the target map; nothing stored")
    return plan


def store_plan(url: str, cfg: JobConfig, snap: dict[str, Any], target: Sequence[int], plan: policy.Plan,
               req: PlanRequest, model: policy.CostModel, now: datetime | None = None) -> dict[str, Any]:
    """Store plan + steps (payload = the control message) in one transaction; returns a summary."""
    now = now or _now()
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
            effective_at=now + timedelta(seconds=s.effective_offset_s), reason=req.reason[:500],
        )
        steps.append(repo.StepRecord(plan_id, s.step, msg.to_dict(), msg.effective_at, None, None, None,
                                     model.predict_step(s)))
    rec = repo.PlanRecord(
        plan_id=plan_id, job=cfg.job, operator=cfg.operator, created_at=now, strategy=plan.strategy,
        status="planned", source_map_version=snap["map"]["version"], source_workers=snap["map"]["workers"],
        target_workers=plan.to_workers, target_assignment=tuple(target), steps=n, params=params,
        predicted_ms=total, reason=req.reason, finished_at=None,
    )
    repo.save_plan(url, rec, steps)
    if req.decision_id is not None:
        repo.link_decision(url, req.decision_id, plan_id)
    repo.add_event(url, cfg.job, cfg.operator, "info", "plan",
                   f"plan {plan_id}: {plan.strategy}, {n} step(s), {plan.bins} bin(s), "
                   f"workers {plan.from_workers}->{plan.to_workers}",
                   details={"plan_id": plan_id})
    log.info("stored plan %s\n%s", plan_id, policy.render_plan(plan, model))
    return {"plan_id": plan_id, "steps": n, "bins": plan.bins, "bytes": plan.bytes, "strategy": plan.strategy,
            "predicted_ms": total, "predicted_max_pause_ms": worst, "emit_mode": req.emit_mode}


def plan_rebalance(url: str, cfg: JobConfig, snap: dict[str, Any], decision: dict[str, Any]) -> dict[str, Any] | None:
    """Place + plan + store for a scheduled decision; None when the decision is "no change"."""
    if decision["action"] == "no_change":
        return None
    placed = place(snap, int(decision["target_workers"]))
    if placed["assignment"] == snap["map"]["assignment"] and decision["target_workers"] == snap["map"]["workers"]:
        log.info("placement keeps every bin where it is: nothing to plan")
        return None
    rb = cfg.rebalance
    req = PlanRequest(strategy=rb.strategy, order=rb.order, step_size=rb.step_size, byte_budget=rb.byte_budget,
                      gap_seconds=rb.gap_seconds, pause_budget_ms=rb.pause_budget_ms, emit_mode=rb.emit_mode,
                      source="rebalance", reason=decision["reason"], decision_id=decision["decision_id"])
    model = cost_model(url, cfg)
    plan = build_plan(cfg, snap, placed["assignment"], placed["target_workers"], req, model)
    return store_plan(url, cfg, snap, placed["assignment"], plan, req, model)


# ------------------------------------------------------------------------------------ manual


def manual_target(snap: dict[str, Any], bins: int, target_workers: int | None,
                  moves: list[dict[str, Any]] | None) -> tuple[list[int], int]:
    """Target map of a manual request: a worker count (placement decides) or explicit moves.

    Explicit moves keep every other bin where it is; the worker count after is the given one or
    the smallest that holds every named worker (at least the current one).
    """
    cur = list(snap["map"]["assignment"])
    workers = int(snap["map"]["workers"])
    if bool(target_workers) == bool(moves):
        raise InvalidRequest("give either target_workers or a non-empty list of moves, not both and not neither")
    if target_workers:
        return place(snap, int(target_workers))["assignment"], int(target_workers)
    assert moves is not None
    new = list(cur)
    seen: set[int] = set()
    for i, mv in enumerate(moves):
        b, to = mv.get("bin"), mv.get("to")
        if not isinstance(b, int) or not isinstance(to, int):
            raise InvalidRequest(f"moves[{i}] must be {{'bin': int, 'to': int}}, got {mv!r}")
        if not 0 <= b < bins:
            raise InvalidRequest(f"moves[{i}]: bin {b} is outside 0..{bins - 1}")
        if to < 0:
            raise InvalidRequest(f"moves[{i}]: worker {to} is negative")
        if b in seen:
            raise InvalidRequest(f"moves[{i}]: bin {b} is named twice")
        seen.add(b)
        if cur[b] == to:
            raise InvalidRequest(f"moves[{i}]: bin {b} is already on worker {to}")
        new[b] = to
    w_after = max(workers, max(new) + 1)
    return new, w_after


def plan_manual(url: str, cfg: JobConfig, params: dict[str, Any]) -> dict[str, Any]:
    """Validate a manual request against the live map, plan it; store it unless dry_run."""
    open_ = repo.open_plans(url, cfg.job, cfg.operator)
    if open_:
        raise InvalidRequest(
            f"plan {open_[-1].plan_id} of {cfg.job}/{cfg.operator} is still {open_[-1].status}; wait for it "
            "(or let ballast_rebalance resume it) before starting another migration"
        )
    current = repo.latest_map(url, cfg.job, cfg.operator)
    if current is None:
        raise InvalidRequest(f"job {cfg.job}/{cfg.operator} has no routing map yet: start it with ballast_supervise")
    stats = repo.bin_stats(url, cfg.job, cfg.operator, current.bins, cfg.rebalance.window_epochs)
    snap = {"map": {"version": current.map_version, "epoch": current.epoch, "workers": current.workers,
                    "assignment": list(current.assignment)},
            "bins": {"load": list(stats.load), "bytes": list(stats.bytes), "keys": list(stats.keys)}}
    tw = params.get("target_workers")
    target, target_workers = manual_target(snap, current.bins, tw, params.get("moves") or None)
    if not cfg.min_workers <= target_workers <= cfg.max_workers:
        raise InvalidRequest(
            f"{target_workers} workers is outside this job's bounds [{cfg.min_workers}, {cfg.max_workers}] "
            "(min_workers/max_workers in the jobs file)"
        )
    if target == list(current.assignment) and target_workers == current.workers:
        raise InvalidRequest("the request changes nothing: every bin is already where it would go")
    rb = cfg.rebalance
    req = PlanRequest(
        strategy=params.get("strategy") or "auto", order=params.get("order") or rb.order,
        step_size=params.get("step_size"), byte_budget=params.get("byte_budget"),
        gap_seconds=float(params.get("gap_seconds") or 0.0), pause_budget_ms=rb.pause_budget_ms,
        emit_mode=params.get("emit_mode") or rb.emit_mode, source="manual",
        reason=params.get("reason") or "manual migration",
    )
    model = cost_model(url, cfg)
    plan = build_plan(cfg, snap, target, target_workers, req, model)
    rendered = policy.render_plan(plan, model)
    worst, total = model.predict_plan(plan)
    if params.get("dry_run"):
        log.info("DRY RUN — nothing stored, nothing emitted:\n%s", rendered)
        return {"dry_run": True, "plan_id": None, "steps": len(plan.steps), "bins": plan.bins,
                "predicted_ms": total, "predicted_max_pause_ms": worst, "rendered": rendered}
    out = store_plan(url, cfg, snap, target, plan, req, model)
    out["rendered"] = rendered
    return out


# ------------------------------------------------------------------------------------ await/verify


@dataclass(frozen=True)
class Progress:
    """Checkpoint state of a plan's steps (what the trigger polls)."""

    done: bool  # every awaited step has an applied checkpoint
    failed_step: int | None
    failed_reason: str
    missing: tuple[int, ...]


def progress(url: str, plan_id: str, steps: Sequence[int]) -> Progress:
    cps = repo.checkpoints(url, plan_id)
    for k in sorted(cps):
        if cps[k].status != "applied":
            return Progress(False, k, f"step {k} was {cps[k].status}: {cps[k].reason or 'no reason given'}", ())
    missing = tuple(s for s in steps if s not in cps)
    return Progress(not missing, None, "", missing)


def operator_advice(url: str, plan_id: str) -> str:
    """What an operator should do about a plan that stopped: depends on what was emitted."""
    plan = repo.get_plan(url, plan_id)
    steps = repo.plan_steps(url, plan_id)
    cps = repo.checkpoints(url, plan_id)
    emitted = [s.step for s in steps if s.emitted]
    unacked = [k for k in emitted if k not in cps]
    applied = [k for k, c in cps.items() if c.status == "applied"]
    cur = repo.latest_map(url, plan.job, plan.operator) if plan else None
    parts = [f"plan {plan_id}: {len(applied)}/{len(steps)} step(s) applied, map now at "
             f"v{cur.map_version if cur else '?'} with {cur.workers if cur else '?'} worker(s); "
             "no further step will be emitted for this plan."]
    if unacked:
        parts.append(
            f"Step(s) {unacked} were emitted but have no checkpoint: if the job is alive they may still apply "
            "(each expects an exact map version, so they cannot half-apply or apply out of order). "
            "Check the job's heartbeat (ballast_supervise) and its driver log."
        )
    parts.append("The job's state is consistent at every map version. When the job is healthy, the next "
                 "ballast_rebalance run plans from the map in force; or trigger ballast_migrate by hand.")
    return " ".join(parts)


def fail_plan(url: str, plan_id: str, reason: str, kind: str = "plan_failed") -> str:
    """Mark a plan failed with an Event; returns the message to raise (reason + operator advice)."""
    plan = repo.get_plan(url, plan_id)
    advice = operator_advice(url, plan_id)
    msg = f"{reason}. {advice}"
    repo.set_plan_status(url, plan_id, "failed", reason=reason, finished=True)
    if plan:
        repo.add_event(url, plan.job, plan.operator, "error", kind, msg[:2000], details={"plan_id": plan_id})
    return msg


def verify(url: str, plan_id: str) -> dict[str, Any]:
    """Every step checkpointed as applied and the map the last step produced equals the target."""
    plan = repo.get_plan(url, plan_id)
    if plan is None:
        raise PlanFailed(f"plan {plan_id} is not in the metrics DB")
    steps = repo.plan_steps(url, plan_id)
    pr = progress(url, plan_id, [s.step for s in steps])
    if pr.failed_step is not None:
        raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id} failed: {pr.failed_reason}", "plan_rejected"))
    if pr.missing:
        raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id}: step(s) {list(pr.missing)} have no checkpoint",
                                   "plan_incomplete"))
    final_version = plan.source_map_version + plan.steps
    cps = repo.checkpoints(url, plan_id)
    last = cps[max(cps)] if cps else None
    if last is not None and last.map_version_after not in (None, final_version):
        raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id}: last checkpoint reports map v{last.map_version_after}, "
                                                 f"expected v{final_version}", "plan_mismatch"))
    final = repo.map_at(url, plan.job, plan.operator, final_version)
    if final is None:
        raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id}: routing map v{final_version} is not recorded",
                                   "plan_mismatch"))
    if list(final.assignment) != list(plan.target_assignment) or final.workers != plan.target_workers:
        diff = [b for b, (a, t) in enumerate(zip(final.assignment, plan.target_assignment)) if a != t]
        raise PlanFailed(fail_plan(
            url, plan_id, f"plan {plan_id}: map v{final_version} differs from the target "
            f"(workers {final.workers} vs {plan.target_workers}; bins {diff[:20]})", "plan_mismatch"))
    repo.set_plan_status(url, plan_id, "completed", finished=True)
    repo.add_event(url, plan.job, plan.operator, "info", "plan_completed",
                   f"plan {plan_id} completed: map v{final_version}, {final.workers} worker(s)",
                   details={"plan_id": plan_id})
    table = summary_table(url, plan_id)
    log.info("plan %s verified\n%s", plan_id, table)
    return {"plan_id": plan_id, "map_version": final_version, "workers": final.workers, "summary": table}


def summary_table(url: str, plan_id: str) -> str:
    """Per-step table for the task log: step, moves, bins, status, applied epoch, ms, bytes."""
    steps = repo.plan_steps(url, plan_id)
    cps = repo.checkpoints(url, plan_id)
    rows = [("step", "moves", "bins", "workers", "status", "epoch", "ms", "bytes", "emitted@offset")]
    for s in steps:
        mv = s.payload.get("moves", [])
        txt = ", ".join(f"{m['bin']}:{m['from']}->{m['to']}" for m in mv[:4]) + (" …" if len(mv) > 4 else "")
        c = cps.get(s.step)
        rows.append((
            str(s.step), txt or "-", str(len(mv)), str(s.payload.get("workers", "")),
            c.status if c else ("in flight" if s.emitted else "not sent"),
            str(c.applied_epoch) if c and c.applied_epoch is not None else "-",
            f"{c.migration_ms:.0f}" if c else "-", f"{c.bytes_moved:,}" if c else "-",
            f"{s.kafka_partition}:{s.kafka_offset}" if s.emitted else "-",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(col.ljust(w) for col, w in zip(r, widths)) for r in rows]
    applied = [c for c in cps.values() if c.status == "applied"]
    lines.append(f"total: {len(applied)}/{len(steps)} applied, {sum(c.bins_moved for c in applied)} bins, "
                 f"{sum(c.bytes_moved for c in applied):,} bytes, {sum(c.migration_ms for c in applied):.0f} ms migrating")
    return "\n".join(lines)


def db_unreachable(exc: BaseException) -> bool:
    """The metrics DB is down or unreachable (worth retrying), as opposed to a query that is wrong."""
    from migrations_db.db import is_unreachable

    return is_unreachable(exc)


def run_plan_blocking(url: str, bootstrap: str, plan_id: str, timeout_s: float, poll_s: float = 0.5,
                      mode: str | None = None, signing_key: Any = None, security: Any = None,
                      on_db_outage: Any = None) -> dict[str, Any]:
    """Emit + await + verify in one blocking call (tests, shells); the DAG does the same deferrably.

    The metrics DB or the broker being unreachable is reported (log warning, `on_db_outage(exc)`
    for the DB) and retried until the deadline: emission is idempotent per (plan, step) (a step
    the broker did not acknowledge is not recorded as emitted; one sent twice is a duplicate the
    job ignores).
    """
    from ballast.emitter import ControlEmitter, EmitError

    plan = repo.get_plan(url, plan_id)
    if plan is None:
        raise PlanFailed(f"plan {plan_id} is not in the metrics DB")
    mode = mode or plan.params.get("emit_mode", "flow-control")
    deadline = time.monotonic() + timeout_s
    with ControlEmitter(bootstrap, url, signing_key=signing_key, security=security) as em:
        while True:
            try:
                out = em.emit(plan_id, mode)  # type: ignore[arg-type]
                if out.failed_step is not None:
                    raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id} failed: {out.failed_reason}",
                                               "plan_rejected"))
                pr = progress(url, plan_id, range(1, plan.steps + 1))
            except Exception as exc:
                broker = isinstance(exc, EmitError) and exc.transient
                if not (broker or db_unreachable(exc)) or time.monotonic() > deadline:
                    raise
                log.warning("plan %s: %s unreachable (%s); retrying in %.0fs", plan_id,
                            "broker" if broker else "metrics DB", str(exc).splitlines()[0][:200], max(poll_s, 2.0))
                if on_db_outage is not None and not broker:
                    on_db_outage(exc)
                time.sleep(max(poll_s, 2.0))
                continue
            if pr.done:
                break
            if time.monotonic() > deadline:
                raise PlanFailed(fail_plan(url, plan_id, f"plan {plan_id}: no checkpoint for step(s) "
                                                         f"{list(pr.missing)} within {timeout_s:.0f}s", "plan_timeout"))
            time.sleep(poll_s)
    return verify(url, plan_id)


__all__ = [
    "NotReady", "PlanFailed", "InvalidRequest", "PlanRequest", "Progress", "collect", "evaluate", "place",
    "plan_rebalance", "plan_manual", "build_plan", "store_plan", "manual_target", "progress", "verify",
    "fail_plan", "operator_advice", "summary_table", "run_plan_blocking", "cost_model",
]
