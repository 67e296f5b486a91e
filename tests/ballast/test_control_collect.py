"""ballast.control.collect: a run decides only on epochs that ran under the map in force, or resumes
the open plan it may drive instead; an operator held by another run's plan, a job that never ran or
has no epoch under its current map yet is NotReady with what to do. On a real migrated SQLite
metrics DB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ballast import store
from ballast.control import collect
from ballast.control.handoffs import OperatorSample, Resume, Snapshot
from ballast.store import writer
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane


def _open_plan(url: str, job: str, plan_id: str, owner: str, status: str = "planned", seen_s_ago: float = 0.0) -> None:
    seen = datetime.now(UTC) - timedelta(seconds=seen_s_ago)
    store.save_plan(url, store.PlanRecord(plan_id, job, "keycount", seen, "fluid", status, 0, 1, 2, (0,) * 16, 1, {},
                                        None, "test", None, owner, seen), [])


def test_collect_reads_the_current_map_and_window_and_refuses_an_unknown_job(db_url, job):
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    assert snap.map.workers == 1 and len(snap.map.assignment) == 16 and snap.latest_epoch == 5
    assert [e.epoch for e in snap.epochs] == [1, 2, 3, 4, 5] and len(snap.workers) == 5
    assert snap.bins.epochs == 5 and sum(snap.bins.load) > 0
    with pytest.raises(collect.NotReady, match="has no routing map"):
        collect.collect(db_url, job.model_copy(update={"job": "never-ran"}))


def test_the_window_holds_only_the_last_window_epochs(db_url, job):
    seed_job(db_url, job.job, bins=16, first_epoch=6, epochs=4)  # 9 epochs in all; window_epochs is 5
    snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot)
    assert [e.epoch for e in snap.epochs] == [5, 6, 7, 8, 9] and snap.latest_epoch == 9
    assert {w.epoch for w in snap.workers} == {5, 6, 7, 8, 9} and snap.flow == ()


def test_no_epoch_under_the_current_map_yet_is_not_ready(db_url, job):
    """A plan just changed the map: the window's epochs ran at the old worker count, and mixing
    them would judge the new map by the old one's load."""
    with writer.epoch_transaction(db_url) as s:
        writer.ensure_routing_map(s, job.job, "keycount", 1, 6, 2, [b % 2 for b in range(16)],
                                  datetime.now(UTC), "p-1", 1)
    with pytest.raises(collect.NotReady, match=f"no epoch of {job.job}/keycount ran under the current map v1"):
        collect.collect(db_url, job)
    current, bins = collect.current_state(db_url, job)  # a manual plan needs no window of its own
    assert (current.map_version, current.workers) == (1, 2) and len(bins.load) == 16


def test_a_plan_this_run_owns_is_resumed_not_decided_anew(db_url, job):
    _open_plan(db_url, job.job, "mine-1", "ballast_rebalance__x/scheduled__1")
    got = collect.collect(db_url, job, owner="ballast_rebalance__x/scheduled__1")
    assert isinstance(got, Resume) and got.plan_id == "mine-1" and "is this run's; resuming it" in got.reason
    assert store.get_plan(db_url, "mine-1").owner == "ballast_rebalance__x/scheduled__1"  # type: ignore[union-attr]


@pytest.mark.parametrize("owner, status, seen_s_ago, why", [
    ("ballast_rebalance__x/scheduled__1", "planned", 0.0, "alive"),  # the same DAG's earlier run, still alive
    ("ballast_migrate/manual__1", "emitting", 3600.0, "not seen for over"),  # a person's plan: never taken over
    ("ballast_rebalance__x/scheduled__1", "awaiting_approval", 3600.0, "awaiting_approval"),  # waits for a person
    ("cli:host:42", "planned", 3600.0, "owner cli:host:42"),  # a shell's plan is not a DAG run's
])
def test_a_plan_another_run_holds_is_not_ready_and_left_as_it_is(db_url, job, owner, status, seen_s_ago, why):
    _open_plan(db_url, job.job, "theirs-1", owner, status, seen_s_ago)
    with pytest.raises(collect.NotReady, match=why) as exc:
        collect.collect(db_url, job, owner="ballast_rebalance__x/scheduled__2")
    assert "theirs-1" in str(exc.value) and "only one plan per operator may be open" in str(exc.value)
    after = store.get_plan(db_url, "theirs-1")
    assert after is not None and (after.owner, after.status) == (owner, status)
    assert store.events(db_url, job.job, kind="plan_taken_over") == []


def test_a_gone_run_of_the_same_dag_is_taken_over_and_recorded(db_url, job):
    _open_plan(db_url, job.job, "left-1", "ballast_rebalance__x/scheduled__1", seen_s_ago=store.OWNER_LEASE_S + 60)
    got = collect.open_plan_for(db_url, job, owner="ballast_rebalance__x/scheduled__2")
    assert isinstance(got, Resume) and got.plan_id == "left-1" and "takes it over" in got.reason
    assert store.get_plan(db_url, "left-1").owner == "ballast_rebalance__x/scheduled__2"  # type: ignore[union-attr]
    [ev] = store.events(db_url, job.job, kind="plan_taken_over")
    assert ev.details == {"plan_id": "left-1"} and "ballast_rebalance__x/scheduled__1" in ev.message
    assert collect.open_plan_for(db_url, job.model_copy(update={"job": "no-plans"})) is None


def test_an_operator_that_has_not_run_is_a_node_without_measurements(db_url, job):
    assert collect.operator_sample(db_url, job, "counts") == OperatorSample("counts", 1)
    ran = collect.operator_sample(db_url, job, "keycount")
    assert ran.workers == 1 and [e.epoch for e in ran.epochs] == [1, 2, 3, 4, 5] and len(ran.samples) == 5


def test_a_metrics_db_without_the_traces_table_collects_without_the_critical_path(db_url, job, caplog):
    """A DB not upgraded to schema 0005 yet: the snapshot has no critical path (DS2 and the guards
    decide alone) and the log says which command adds the table."""
    import logging

    from sqlalchemy import create_engine, text

    with create_engine(db_url).begin() as c:
        c.execute(text("DROP TABLE epoch_traces"))
    with caplog.at_level(logging.WARNING, "ballast.control"):
        snap = collect.collect(db_url, job)
    assert isinstance(snap, Snapshot) and snap.critical == () and snap.epochs
    assert "python -m ballast.store upgrade` adds their table" in caplog.text
