"""The control loop the DAG tasks call, wired from its stages (ballast.control):
collect → evaluate (DS2 + guards) → place → plan → emit (ballast.emitter) → await → verify.

Only wiring here. Each stage is a module with typed, frozen hand-offs (ballast.control.handoffs);
these functions take and return their `to_dict()` forms because that is what crosses Airflow task
boundaries as XCom. Every decision is stored, "no change" included; every plan and step is
stored before anything is emitted, so an interrupted run resumes from the DB, never from memory;
one open plan per operator is enforced by the DB (ballast.plan_store). Pure of Airflow so a test
(or a shell) can drive a whole rebalance against a real broker and metrics DB.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ballast import repository as repo
from ballast.config import JobConfig
from ballast.control import collect as _collect
from ballast.control import evaluate as _evaluate
from ballast.control.collect import NotReady, open_plan_for
from ballast.control.evaluate import GUARD_STATE_KEY, assess
from ballast.control.handoffs import Placement, ScalingDecision, Snapshot
from ballast.control.manual import InvalidRequest, manual_target, plan_manual, take_over_manual
from ballast.control.place import place as _place
from ballast.control.plan import PlanFailed, PlanRequest, build_plan, cost_model, new_plan_id, store_plan
from ballast.control.render import summary_table
from ballast.control.verify import Progress, fail_plan, operator_advice, progress
from ballast.control.verify import verify as _verify

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
    placed: Placement = _place(s.map.assignment, s.bins, d.target_workers)
    if placed.assignment == s.map.assignment and d.target_workers == s.map.workers:
        log.info("placement keeps every bin where it is: nothing to plan")
        return None
    rb = cfg.rebalance
    req = PlanRequest(strategy=rb.strategy, order=rb.order, step_size=rb.step_size, byte_budget=rb.byte_budget,
                      gap_seconds=rb.gap_seconds, pause_budget_ms=rb.pause_budget_ms, emit_mode=rb.emit_mode,
                      source="rebalance", reason=d.reason, decision_id=d.decision_id)
    model = cost_model(url, cfg)
    plan = build_plan(s.map, s.bins, placed.assignment, placed.target_workers, req, model)
    return store_plan(url, cfg, s.map, placed.assignment, plan, req, model).to_dict()


def verify(url: str, plan_id: str) -> dict[str, Any]:
    """Stage 6 as XCom: `{"plan_id", "map_version", "workers", "summary"}`; raises PlanFailed."""
    return _verify(url, plan_id).to_dict()


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
    "GUARD_STATE_KEY", "InvalidRequest", "NotReady", "PlanFailed", "PlanRequest", "Progress", "assess",
    "build_plan", "collect", "cost_model", "db_unreachable", "evaluate", "fail_plan", "manual_target",
    "new_plan_id", "open_plan_for", "operator_advice", "place", "plan_manual", "plan_rebalance", "progress",
    "run_plan_blocking", "store_plan", "summary_table", "take_over_manual", "verify",
]
