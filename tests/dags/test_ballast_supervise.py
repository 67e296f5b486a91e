"""dags/ballast_supervise.py: one DAG per job of the jobs file, on its schedule, one short
health-check task per run bound to its job, never a task as long as the stream. Parsed as the
scheduler does, without running it (the supervisor itself: tests/ballast/test_supervisor.py)."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest

from tests.helpers.dag_bag import dag_bag

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def bag(tmp_path_factory):  # type: ignore[no-untyped-def]
    return dag_bag(tmp_path_factory.mktemp("jobs"))


def test_one_short_health_check_per_job_on_the_files_schedule(bag):
    ids = {d for d in bag.dag_ids if d.startswith("ballast_supervise")}
    assert ids == {"ballast_supervise__clicks", "ballast_supervise__orders"}
    for job in ("clicks", "orders"):
        dag = bag.dags[f"ballast_supervise__{job}"]
        assert [t.task_id for t in dag.tasks] == ["supervise"]
        assert dag.schedule == "*/3 * * * *" and dag.max_active_runs == 1 and not dag.catchup
        assert dag.dagrun_timeout == timedelta(minutes=10), "a health check, not a task that lives with the stream"
        assert dag.tags == {"ballast", "supervise", f"job:{job}"} and dag.get_task("supervise").retries == 0
        fn = dag.get_task("supervise").python_callable
        assert inspect.signature(fn).parameters["job"].default == job, "a job's DAG supervises only that job"


def test_a_job_without_a_supervise_schedule_is_supervised_only_by_hand(tmp_path):
    jobs = 'schedules: {supervise: null}\njobs:\n  - {job: a, operator: keycount, input_topic: a}\n'
    dag = dag_bag(tmp_path, jobs).dags["ballast_supervise__a"]
    assert dag.schedule is None
