"""The control loop the DAG tasks call, wired from its stages (ballast.control):
collect → evaluate (DS2 + guards) → place → plan → emit (ballast.emitter) → await → verify.

Only wiring here. Each stage is a module with typed, frozen hand-offs (ballast.control.handoffs);
these functions take and return their `to_dict()` forms because that is what crosses Airflow task
boundaries as XCom. Every decision is stored, "no change" included; every plan and step is
stored before anything is emitted, so an interrupted run resumes from the DB, never from memory;
one open plan per operator is enforced by the DB (ballast.store.plans). Pure of Airflow so a test
(or a shell) can drive a whole rebalance against a real broker and metrics DB.
"""

from __future__ import annotations

import logging
from typing import Any

from ballast.config import JobConfig
from ballast.control import collect as _collect
from ballast.control import evaluate as _evaluate
from ballast.control.blocking import db_unreachable, run_plan_blocking
from ballast.control.collect import NotReady, open_plan_for
from ballast.control.evaluate import GUARD_STATE_KEY, assess
from ballast.control.handoffs import Placement, ScalingDecision, Snapshot
from ballast.control.manual import InvalidRequest, manual_target, plan_manual, take_over_manual
from ballast.control.place import place as _place
from ballast.control.plan import (
    PlanFailed,
    PlanRequest,
    build_plan,
    cost_model,
    declared_window,
    new_plan_id,
    store_plan,
    store_settings,
    store_split,
)
from ballast.control.render import summary_table
from ballast.control.upgrade import plan_upgrade
from ballast.control.verify import Progress, fail_plan, operator_advice, progress
from ballast.control.verify import verify as _verify
from ballast.protocol import Settings

log = logging.getLogger(__name__)


def collect(url: str, cfg: JobConfig, owner: str | None = None) -> dict[str, Any]:
    """Stage 1 as XCom: `{"status": "ready", …}` (a Snapshot) or `{"status": "resume", "plan_id", "reason"}`.
    Raises NotReady (the DAG skips) when there is nothing to decide or another run holds the operator."""
    return _collect.collect(url, cfg, owner).to_dict()


def evaluate(url: str, cfg: JobConfig, snap: dict[str, Any], now: Any = None) -> dict[str, Any]:
    """Stage 2 as XCom: the stored ScalingDecision."""
    return _evaluate.evaluate(url, cfg, Snapshot.from_dict(snap), now).to_dict()


def place(snap: dict[str, Any], target_workers: int) -> dict[str, Any]:
    """Stage 3 as XCom: the Placement for `target_workers`."""
    s = Snapshot.from_dict(snap)
    return _place(s.map.assignment, s.bins, target_workers).to_dict()


def plan_rebalance(url: str, cfg: JobConfig, snap: dict[str, Any], decision: dict[str, Any]) -> dict[str, Any] | None:
    """Stages 3–4 for a scheduled decision: place, plan, store; None when nothing would move."""
    d = ScalingDecision.from_dict(decision)
    if d.action == "no_change":
        return None
    s = Snapshot.from_dict(snap)
    if d.action == "split" and d.target_bins:
        return plan_split(url, cfg, s, d)
    if d.action == "tune" and d.settings:
        req = PlanRequest(strategy="all-at-once", source="rebalance", reason=d.reason, decision_id=d.decision_id)
        return store_settings(url, cfg, s.map, Settings(**d.settings), req).to_dict()
    placed: Placement = _place(s.map.assignment, s.bins, d.target_workers)
    if placed.assignment == s.map.assignment and d.target_workers == s.map.workers:
        log.info("placement keeps every bin where it is: nothing to plan")
        return None
    rb = cfg.rebalance
    req = PlanRequest(strategy=rb.strategy, order=rb.order, step_size=rb.step_size, byte_budget=rb.byte_budget,
                      gap_seconds=rb.gap_seconds, pause_budget_ms=rb.pause_budget_ms, emit_mode=rb.emit_mode,
                      step_budget_s=rb.step_budget_s, source="rebalance", reason=d.reason, decision_id=d.decision_id)
    model = cost_model(url, cfg)  # each bin by transfer, pre-copy or handover, by this model and the job's budgets
    plan = build_plan(s.map, s.bins, placed.assignment, placed.target_workers, req, model, declared_window(url, cfg))
    return store_plan(url, cfg, s.map, placed.assignment, plan, req, model).to_dict()


def plan_split(url: str, cfg: JobConfig, s: Snapshot, d: ScalingDecision) -> dict[str, Any]:
    """A one-step plan that raises the bin count to `d.target_bins`; nothing moves."""
    assert d.target_bins is not None
    req = PlanRequest(strategy="all-at-once", source="rebalance", reason=d.reason, decision_id=d.decision_id)
    return store_split(url, cfg, s.map, d.target_bins, req).to_dict()


def verify(url: str, plan_id: str) -> dict[str, Any]:
    """Stage 6 as XCom: `{"plan_id", "map_version", "workers", "summary"}`; raises PlanFailed."""
    return _verify(url, plan_id).to_dict()


__all__ = [
    "GUARD_STATE_KEY", "InvalidRequest", "NotReady", "PlanFailed", "PlanRequest", "Progress", "assess",
    "build_plan", "collect", "cost_model", "db_unreachable", "evaluate", "fail_plan", "manual_target",
    "new_plan_id", "open_plan_for", "operator_advice", "place", "plan_manual", "plan_rebalance", "plan_split",
    "plan_upgrade", "progress", "run_plan_blocking", "store_plan", "summary_table", "take_over_manual", "verify",
]
