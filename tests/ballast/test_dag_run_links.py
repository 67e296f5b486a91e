"""ballast.dag_run_links: a plan or a decision links to the DAG run that was running when it was
made: the job's own run (a per-job DAG before the shared one), never a dry run or another job's.
Fast: the runs are stand-ins (Airflow's DB is migrated for the module's Airflow imports)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ballast import dag_run_links

pytestmark = pytest.mark.controlplane


def test_decisions_and_plans_link_to_the_dag_run_that_was_running(airflow_db):
    from types import SimpleNamespace as Run

    t = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    runs = [
        Run(dag_id="ballast_migrate", run_id="dry", start_date=t, end_date=t + timedelta(minutes=5),
            conf={"job": "clicks", "dry_run": True}),
        Run(dag_id="ballast_migrate", run_id="other-job", start_date=t, end_date=t + timedelta(minutes=5),
            conf={"job": "orders", "dry_run": False}),
        Run(dag_id="ballast_migrate", run_id="manual__1", start_date=t, end_date=None,
            conf={"job": "clicks", "dry_run": False}),
        Run(dag_id="ballast_rebalance", run_id="scheduled__a", start_date=t, end_date=t + timedelta(seconds=30),
            conf={}),
        Run(dag_id="ballast_rebalance_clicks", run_id="scheduled__b", start_date=t, end_date=t + timedelta(seconds=30),
            conf={}),
    ]
    at = (t + timedelta(seconds=10)).isoformat()
    link = dag_run_links.run_link(runs, at, "ballast_migrate", "clicks")
    assert link["run_id"] == "manual__1" and link["url"].endswith("/dags/ballast_migrate/runs/manual__1")
    # the per-job DAG wins
    assert dag_run_links.run_link(runs, at, "ballast_rebalance", "clicks")["run_id"] == "scheduled__b"
    assert dag_run_links.run_link(runs, at, "ballast_rebalance", "orders")["run_id"] == "scheduled__a"
    assert dag_run_links.run_link(runs, (t + timedelta(minutes=2)).isoformat(), "ballast_rebalance", "clicks") is None
    assert dag_run_links.run_link(runs, None, "ballast_migrate", "clicks") is None
