"""ballast.control.verify: a plan completes only when every step applied and the map its last step
produced is the target; otherwise it is failed with an event and advice that depends on what was
emitted, and releases its operator. Polling progress renews the owner's lease. On a real migrated
SQLite metrics DB (steps applied as the data plane records them, no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from ballast import store
from ballast.control import manual, plan, render, verify
from ballast.protocol import step_from_document
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.stepapplier import apply_step

pytestmark = pytest.mark.controlplane


def _plan(url: str, cfg, strategy: str = "fluid") -> tuple[str, int]:  # type: ignore[no-untyped-def]
    out = manual.plan_manual(url, cfg, {"target_workers": 2, "strategy": strategy, "dry_run": False})
    return out["plan_id"], out["steps"]


def _apply(url: str, cfg, plan_id: str, reject: dict[int, str] | None = None) -> None:  # type: ignore[no-untyped-def]
    """Every step of the plan, as the data plane records it (a rejection for the steps in `reject`)."""
    for rec in store.plan_steps(url, plan_id):
        apply_step(url, cfg.job, cfg.operator, step_from_document(rec.payload), (reject or {}).get(rec.step, ""))


def test_verify_fails_an_incomplete_plan_and_releases_the_operator(db_url, job):
    out = manual.plan_manual(db_url, job, {"target_workers": 2, "strategy": "fluid", "dry_run": False})
    pr = verify.progress(db_url, out["plan_id"], range(1, out["steps"] + 1))
    assert not pr.done and pr.missing == tuple(range(1, out["steps"] + 1))
    table = render.summary_table(db_url, out["plan_id"])
    assert table.splitlines()[0].split()[:3] == ["step", "moves", "bins"] and "not sent" in table
    with pytest.raises(plan.PlanFailed, match="have no checkpoint"):
        verify.verify(db_url, out["plan_id"])
    assert store.get_plan(db_url, out["plan_id"]).status == "failed"  # type: ignore[union-attr]
    assert store.open_plans(db_url, job.job, job.operator) == []  # another plan may start



def test_a_plan_whose_steps_all_applied_to_the_target_completes(db_url, job):
    plan_id, n = _plan(db_url, job)
    _apply(db_url, job, plan_id)
    done = verify.verify(db_url, plan_id)
    assert (done.plan_id, done.map_version, done.workers) == (plan_id, n, 2)
    assert f"total: {n}/{n} applied" in done.summary
    rec = store.get_plan(db_url, plan_id)
    assert rec is not None and rec.status == "completed" and rec.finished_at is not None
    [ev] = store.events(db_url, job.job, kind="plan_completed")
    assert ev.level == "info" and f"map v{n}, 2 worker(s)" in ev.message


def test_a_rejected_step_fails_the_plan_with_its_reason(db_url, job):
    plan_id, n = _plan(db_url, job)
    _apply(db_url, job, plan_id, reject={2: "bin 3 is on worker 1, not 0"})
    pr = verify.progress(db_url, plan_id, range(1, n + 1))
    assert not pr.done and pr.failed_step == 2
    assert pr.failed_reason == "step 2 was rejected: bin 3 is on worker 1, not 0"
    with pytest.raises(plan.PlanFailed, match="step 2 was rejected: bin 3 is on worker 1") as exc:
        verify.verify(db_url, plan_id)
    assert "no further step will be emitted" in str(exc.value)
    assert store.get_plan(db_url, plan_id).status == "failed"  # type: ignore[union-attr]
    [ev] = store.events(db_url, job.job, kind="plan_rejected")
    assert ev.level == "error" and ev.details == {"plan_id": plan_id}


def test_a_final_map_that_differs_from_the_target_fails_the_plan(db_url, job):
    plan_id, n = _plan(db_url, job)
    _apply(db_url, job, plan_id)
    with session_scope(db_url) as s:  # the map the last step produced is not the plan's
        s.execute(update(m.RoutingMap).where(m.RoutingMap.job == job.job, m.RoutingMap.map_version == n)
                  .values(workers=3))
    with pytest.raises(plan.PlanFailed, match=f"map v{n} differs from the target \\(workers 3 vs 2"):
        verify.verify(db_url, plan_id)
    assert store.events(db_url, job.job, kind="plan_mismatch") and store.open_plans(db_url, job.job, "keycount") == []


def test_an_unknown_plan_cannot_be_verified(db_url):
    with pytest.raises(plan.PlanFailed, match="plan nope is not in the metrics DB"):
        verify.verify(db_url, "nope")


def test_the_advice_says_which_emitted_steps_may_still_apply(db_url, job):
    plan_id, n = _plan(db_url, job)
    quiet = verify.operator_advice(db_url, plan_id)
    assert quiet.startswith(f"plan {plan_id}: 0/{n} step(s) applied, map now at v0 with 1 worker(s)")
    assert "were emitted" not in quiet
    store.mark_step_emitted(db_url, plan_id, 1, datetime.now(UTC), 0, 5)
    msg = verify.fail_plan(db_url, plan_id, f"plan {plan_id}: stopped by the test", "plan_timeout")
    assert msg.startswith(f"plan {plan_id}: stopped by the test. plan {plan_id}: 0/{n}")
    assert "Step(s) [1] were emitted but have no checkpoint" in msg
    rec = store.get_plan(db_url, plan_id)
    assert rec is not None and rec.status == "failed" and rec.reason == f"plan {plan_id}: stopped by the test"
    [ev] = store.events(db_url, job.job, kind="plan_timeout")
    assert ev.message == msg


def test_polling_progress_renews_the_owners_lease(db_url, job):
    plan_id, n = _plan(db_url, job)
    with session_scope(db_url) as s:
        s.execute(update(m.Plan).where(m.Plan.plan_id == plan_id)
                  .values(owner_seen_at=datetime.now(UTC) - timedelta(seconds=store.OWNER_LEASE_S + 60)))
    assert not store.get_plan(db_url, plan_id).owner_alive()  # type: ignore[union-attr]
    pr = verify.progress(db_url, plan_id, [1])
    assert (pr.done, pr.failed_step, pr.missing) == (False, None, (1,))
    assert store.get_plan(db_url, plan_id).owner_alive()  # type: ignore[union-attr]
    assert render.summary_table(db_url, plan_id).count("not sent") == n
