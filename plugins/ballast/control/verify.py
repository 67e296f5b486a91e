"""Stage 6, await + verify: checkpoint progress of a plan (what the trigger and sensor poll), and
the final check that every step applied and the map the last step produced is the target.

A plan that cannot complete is failed here with an `events` row and advice that depends on what
was emitted (fail_plan), never left open: an open plan holds its operator.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ballast import store
from ballast.control.handoffs import Verified
from ballast.control.plan import PlanFailed
from ballast.control.render import summary_table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """Checkpoint state of a plan's steps."""

    done: bool  # every awaited step has an applied checkpoint
    failed_step: int | None
    failed_reason: str
    missing: tuple[int, ...]


def progress(url: str, plan_id: str, steps: Sequence[int]) -> Progress:
    """Checkpoints so far; polling them is the owner's sign of life, so it renews the owner's lease."""
    store.touch_owner(url, plan_id)
    cps = store.checkpoints(url, plan_id)
    for k in sorted(cps):
        if cps[k].status != "applied":
            return Progress(False, k, f"step {k} was {cps[k].status}: {cps[k].reason or 'no reason given'}", ())
    missing = tuple(s for s in steps if s not in cps)
    return Progress(not missing, None, "", missing)


def operator_advice(url: str, plan_id: str) -> str:
    """What the on-call person should do about a plan that stopped: depends on what was emitted."""
    plan = store.get_plan(url, plan_id)
    steps = store.plan_steps(url, plan_id)
    cps = store.checkpoints(url, plan_id)
    emitted = [s.step for s in steps if s.emitted]
    unacked = [k for k in emitted if k not in cps]
    applied = [k for k, c in cps.items() if c.status == "applied"]
    cur = store.latest_map(url, plan.job, plan.operator) if plan else None
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
    plan = store.get_plan(url, plan_id)
    msg = f"{reason}. {operator_advice(url, plan_id)}"
    store.set_plan_status(url, plan_id, "failed", reason=reason, finished=True)
    if plan:
        store.add_event(url, plan.job, plan.operator, "error", kind, msg[:2000], details={"plan_id": plan_id})
    return msg


def verify(url: str, plan_id: str) -> Verified:
    """Every step checkpointed as applied and the map the last step produced equals the target."""
    plan = store.get_plan(url, plan_id)
    if plan is None:
        raise PlanFailed(f"plan {plan_id} is not in the metrics DB")

    def failed(reason: str, kind: str) -> PlanFailed:
        return PlanFailed(fail_plan(url, plan_id, reason, kind))

    pr = progress(url, plan_id, [s.step for s in store.plan_steps(url, plan_id)])
    if pr.failed_step is not None:
        raise failed(f"plan {plan_id} failed: {pr.failed_reason}", "plan_rejected")
    if pr.missing:
        raise failed(f"plan {plan_id}: step(s) {list(pr.missing)} have no checkpoint", "plan_incomplete")
    final_version = plan.source_map_version + plan.steps
    cps = store.checkpoints(url, plan_id)
    last = cps[max(cps)] if cps else None
    if last is not None and last.map_version_after not in (None, final_version):
        raise failed(f"plan {plan_id}: last checkpoint reports map v{last.map_version_after}, "
                     f"expected v{final_version}", "plan_mismatch")
    final = store.map_at(url, plan.job, plan.operator, final_version)
    if final is None:
        raise failed(f"plan {plan_id}: routing map v{final_version} is not recorded", "plan_mismatch")
    if list(final.assignment) != list(plan.target_assignment) or final.workers != plan.target_workers:
        diff = [b for b, (a, t) in enumerate(zip(final.assignment, plan.target_assignment)) if a != t]
        raise failed(f"plan {plan_id}: map v{final_version} differs from the target "
                     f"(workers {final.workers} vs {plan.target_workers}; bins {diff[:20]})", "plan_mismatch")
    store.set_plan_status(url, plan_id, "completed", finished=True)
    store.add_event(url, plan.job, plan.operator, "info", "plan_completed",
                   f"plan {plan_id} completed: map v{final_version}, {final.workers} worker(s)",
                   details={"plan_id": plan_id})
    table = summary_table(url, plan_id)
    log.info("plan %s verified\n%s", plan_id, table)
    return Verified(plan_id, final_version, final.workers, table)
