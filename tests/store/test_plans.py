"""ballast.store.plans: at most one open plan per (job, operator), decided by the DB (of two runs
storing at once exactly one wins, the other is told who holds it); a plan changes owner only
explicitly, once its owner is gone (or by force), in one conditional update; a step is sent only
by whoever claims it, until the claim expires or is given back."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.exc import IntegrityError

from ballast import store
from ballast.store import plans
from tests.helpers.race import together as _together

pytestmark = pytest.mark.store


def _record(job: str, plan_id: str, owner: str, status: str = "planned") -> store.PlanRecord:
    return store.PlanRecord(plan_id, job, "keycount", datetime.now(UTC), "fluid", status, 0, 1, 2,
                           (0, 1), 1, {}, None, "test", None, owner)


def _stale(job: str, plan_id: str, owner: str, status: str = "planned", age_s: float = plans.OWNER_LEASE_S + 60,
           finished: datetime | None = None) -> store.PlanRecord:
    """A plan whose owner was last seen `age_s` ago (created then too)."""
    at = datetime.now(UTC) - timedelta(seconds=age_s)
    return store.PlanRecord(plan_id, job, "keycount", at, "fluid", status, 0, 1, 2, (0, 1), 1, {}, None, "test",
                           finished, owner, at)


def test_two_runs_storing_plans_at_once_exactly_one_wins(any_db, unique_name):
    for attempt in range(5):  # five rounds: each a fresh race on the same operator
        ids = [f"{unique_name}-{attempt}-a", f"{unique_name}-{attempt}-b"]
        owners = ["ballast_migrate/manual__1", "ballast_rebalance/scheduled__2"]
        res = _together(*(lambda i=i, ids=ids, owners=owners: store.save_plan(
            any_db, _record(unique_name, ids[i], owners[i]), []) for i in range(2)))
        lost = [r for r in res if isinstance(r, Exception)]
        assert len(lost) == 1 and isinstance(lost[0], store.PlanConflict), res
        winner = ids[res.index(None)]
        msg = str(lost[0])
        assert winner in msg and owners[res.index(None)] in msg and "planned" in msg
        assert "Wait for" in msg and "ballast.control fail" in msg and "take_over" in msg
        assert [p.plan_id for p in store.open_plans(any_db, unique_name, "keycount")] == [winner]
        store.set_plan_status(any_db, winner, "completed", finished=True)  # releases the operator


def test_closed_plans_do_not_hold_the_operator_and_approval_does(any_db, unique_name):
    store.save_plan(any_db, _record(unique_name, "p1", "a/1", status="completed"), [])
    store.save_plan(any_db, _record(unique_name, "p2", "a/2", status="failed"), [])
    store.save_plan(any_db, _record(unique_name, "p3", "a/3", status="awaiting_approval"), [])
    with pytest.raises(store.PlanConflict, match="p3 \\(awaiting_approval, owner a/3"):
        store.save_plan(any_db, _record(unique_name, "p4", "b/4"), [])
    with pytest.raises(store.PlanConflict, match="p3"):  # re-opening a closed plan is refused too
        store.set_plan_status(any_db, "p1", "planned")
    store.set_plan_status(any_db, "p3", "planned")  # approved: same plan, still the one open
    assert [p.status for p in store.open_plans(any_db, unique_name, "keycount")] == ["planned"]


def test_step_claim_is_exclusive_until_it_expires(any_db, unique_name):
    now = datetime.now(UTC)
    store.save_plan(any_db, _record(unique_name, "c1", "a/1"),
                   [store.StepRecord("c1", 1, {"x": 1}, now, None, None, None, None)])
    res = _together(*(lambda c=c: store.claim_step_emission(any_db, "c1", 1, {"x": 2}, now, claimant=c)
                      for c in ("e1", "e2", "e3")))
    assert sorted(res) == [False, False, True]
    step = store.plan_steps(any_db, "c1")[0]
    assert step.claimed_by == ("e1", "e2", "e3")[res.index(True)] and step.claimed_at is not None
    assert not step.emitted
    # a crashed claimant: once its claim is older than the timeout, another emitter may claim it
    time.sleep(0.05)
    assert store.claim_step_emission(any_db, "c1", 1, {"x": 3}, now, claimant="e4", claim_timeout_s=0.01)
    store.mark_step_emitted(any_db, "c1", 1, now, 0, 7)
    assert not store.claim_step_emission(any_db, "c1", 1, {"x": 4}, now, claimant="e5", claim_timeout_s=0.0)
    # a claim given back after an unacknowledged send is free at once
    store.save_plan(any_db, _record(unique_name + "x", "c2", "a/1"),
                   [store.StepRecord("c2", 1, {}, now, None, None, None, None)])
    assert store.claim_step_emission(any_db, "c2", 1, {}, now, claimant="e1")
    store.release_step_claim(any_db, "c2", 1, "e1")
    assert store.claim_step_emission(any_db, "c2", 1, {}, now, claimant="e2")



def test_a_run_is_its_dag_run_inside_airflow_and_its_process_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "ballast_migrate")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026")
    assert plans.current_owner() == "ballast_migrate/manual__2026"
    a, b = plans.new_claimant(), plans.new_claimant()
    assert a != b and a.startswith("ballast_migrate/manual__2026#") and plans.new_claimant("x/y").startswith("x/y#")
    monkeypatch.delenv("AIRFLOW_CTX_DAG_RUN_ID")
    owner = plans.current_owner()
    assert owner.startswith("cli:") and owner.endswith(f":{os.getpid()}")


def test_a_stored_plan_reads_back_with_its_steps_in_order(any_db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CTX_DAG_ID", raising=False)
    now = datetime.now(UTC)
    steps = [store.StepRecord("p1", k, {"step": k}, now + timedelta(seconds=k), None, None, None, 5.0 * k)
             for k in (2, 1, 3)]
    store.save_plan(any_db, _record("j", "p1", ""), steps)  # no owner given: this process's
    p = store.get_plan(any_db, "p1")
    assert p is not None and p.owner == plans.current_owner() and p.is_open and p.owner_alive()
    assert (p.job, p.operator, p.target_assignment, p.params, p.finished_at) == ("j", "keycount", (0, 1), {}, None)
    got = store.plan_steps(any_db, "p1")
    assert [(s.step, s.payload, s.predicted_ms, s.emitted) for s in got] == [
        (1, {"step": 1}, 5.0, False), (2, {"step": 2}, 10.0, False), (3, {"step": 3}, 15.0, False)]
    assert got[0].effective_at == now + timedelta(seconds=1)
    store.mark_step_emitted(any_db, "p1", 2, now, 0, 41)
    s2 = store.plan_steps(any_db, "p1")[1]
    assert s2.emitted and (s2.kafka_partition, s2.kafka_offset) == (0, 41) and s2.emitted_at == now
    assert store.get_plan(any_db, "nope") is None and store.plan_steps(any_db, "nope") == []


def test_a_duplicate_plan_id_of_a_closed_plan_is_an_integrity_error_not_a_conflict(any_db: str) -> None:
    store.save_plan(any_db, _record("j", "p1", "a/1", status="completed"), [])
    with pytest.raises(IntegrityError):
        store.save_plan(any_db, _record("j", "p1", "a/1", status="completed"), [])


def test_the_owners_lease(any_db: str) -> None:
    now = datetime.now(UTC)
    fresh = _stale("j", "p", "a/1", age_s=10)
    assert fresh.owner_alive() and not fresh.owner_alive(lease_s=5)
    assert not fresh.owner_alive(now=now + timedelta(seconds=plans.OWNER_LEASE_S))
    assert not _stale("j", "p", "a/1").owner_alive()
    assert not _stale("j", "p", "a/1", status="completed").is_open and _stale("j", "p", "a/1").is_open
    store.save_plan(any_db, _stale("j", "p2", "a/1"), [])
    store.touch_owner(any_db, "p2")  # the owner polled: alive again
    assert store.get_plan(any_db, "p2").owner_alive()  # type: ignore[union-attr]
    store.save_plan(any_db, _stale("j2", "done", "a/1", status="completed"), [])
    store.touch_owner(any_db, "done")  # a closed plan's lease is not renewed
    assert not store.get_plan(any_db, "done").owner_alive()  # type: ignore[union-attr]


def test_a_plan_changes_owner_only_explicitly_once_its_owner_is_gone(any_db: str) -> None:
    with pytest.raises(store.PlanConflict, match="plan nope is not in the metrics DB; nothing to take over"):
        store.take_over_plan(any_db, "nope", "b/2")
    store.save_plan(any_db, _record("j", "live", "a/1"), [])
    with pytest.raises(store.PlanConflict, match=r"plan live is driven by a/1, seen \d+s ago \(lease 180s\)"):
        store.take_over_plan(any_db, "live", "b/2")
    assert store.take_over_plan(any_db, "live", "a/1").owner == "a/1"  # its own owner: nothing changes
    forced = store.take_over_plan(any_db, "live", "b/2", force=True)  # a person knows that run is gone
    assert forced.owner == "b/2" and forced.owner_alive()
    store.set_plan_status(any_db, "live", "completed", finished=True)
    with pytest.raises(store.PlanConflict, match="plan live is already completed; plan a new migration instead"):
        store.take_over_plan(any_db, "live", "c/3", force=True)
    store.save_plan(any_db, _stale("j", "gone", "a/1"), [])
    taken = store.take_over_plan(any_db, "gone", "c/3")
    assert taken.owner == "c/3" and taken.owner_alive() and store.get_plan(any_db, "gone") == taken


def test_concurrent_takeovers_one_wins(any_db: str) -> None:
    store.save_plan(any_db, _stale("j", "gone", "a/1"), [])
    res = _together(*(lambda o=o: store.take_over_plan(any_db, "gone", o) for o in ("b/2", "c/3", "d/4")))
    won = [r for r in res if isinstance(r, store.PlanRecord)]
    assert len(won) == 1 and store.get_plan(any_db, "gone").owner == won[0].owner  # type: ignore[union-attr]
    assert all(isinstance(r, store.PlanConflict) for r in res if r not in won), res


def test_reads_of_recent_latest_and_last_finished_plans(any_db: str) -> None:
    old = datetime.now(UTC) - timedelta(hours=1)
    store.save_plan(any_db, _stale("j", "a", "x/1", status="completed", age_s=3000, finished=old), [])
    later = old + timedelta(minutes=5)
    store.save_plan(any_db, _stale("j", "b", "x/1", status="completed", age_s=2000, finished=later), [])
    store.save_plan(any_db, _stale("j", "c", "x/1", status="failed", age_s=1000, finished=old), [])
    store.save_plan(any_db, _stale("k", "d", "x/1", age_s=10), [])
    assert [p.plan_id for p in store.recent_plans(any_db)] == ["d", "c", "b", "a"]
    assert [p.plan_id for p in store.recent_plans(any_db, limit=2, job="j")] == ["c", "b"]
    assert store.latest_plan(any_db, "j", "keycount").plan_id == "c"  # type: ignore[union-attr]
    assert store.last_finished_plan(any_db, "j", "keycount").plan_id == "b"  # type: ignore[union-attr]
    assert store.last_finished_plan(any_db, "k", "keycount") is None and store.latest_plan(any_db, "z", "k") is None
    assert [p.plan_id for p in store.open_plans(any_db, "k", "keycount")] == ["d"]


def test_a_status_change_records_the_reason_and_the_end(any_db: str) -> None:
    store.save_plan(any_db, _record("j", "p", "a/1", status="awaiting_approval"), [])
    store.set_plan_status(any_db, "p", "cancelled", reason="rejected by ada", finished=True)
    p = store.get_plan(any_db, "p")
    assert p is not None and (p.status, p.reason, p.is_open) == ("cancelled", "rejected by ada", False)
    assert p.finished_at is not None and p.finished_at.utcoffset() == timedelta(0)


def test_the_conflict_message_names_the_plan_its_owner_and_what_to_do() -> None:
    other = _stale("j", "p-9", "ballast_migrate/manual__1", status="emitting")
    msg = plans.conflict_message(other, "plan p-10 (owner b/2)")
    assert msg.startswith("j/keycount already has an open plan p-9 (emitting, owner ballast_migrate/manual__1, "
                          "not seen for over 180s, created ")
    assert "so plan p-10 (owner b/2) cannot start: only one plan per operator may be open." in msg
    assert "`python -m ballast.control fail p-9`" in msg and "take_over=p-9" in msg
    assert plans.conflict_message(_record("j", "p-8", "")).count("owner unknown, alive") == 1
