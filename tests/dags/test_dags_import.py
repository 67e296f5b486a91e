"""The DAG folder imports with no errors, and the plugin loads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


TWO_JOBS = """
schedules: {supervise: "*/1 * * * *", rebalance: null}
jobs:
  - {job: clicks, operator: keycount, input_topic: clicks}
  - {job: orders, operator: keycount, input_topic: orders, max_workers: 4}
"""


def test_dag_folder_imports_without_errors(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert {"ballast_supervise__clicks", "ballast_rebalance__clicks", "ballast_migrate"} <= set(bag.dag_ids)
    # the ids the console links to (ballast.dag_ids) are the DAGs the files create
    from ballast import dag_ids
    assert {dag_ids.supervise("clicks"), dag_ids.rebalance("clicks"), dag_ids.MIGRATE, dag_ids.RETENTION,
            dag_ids.UPGRADE} <= set(
        bag.dag_ids)
    rebalance = bag.get_dag("ballast_rebalance__clicks")
    assert rebalance.max_active_runs == 1
    assert {t.task_id for t in rebalance.tasks} == {
        "collect", "evaluate", "place_and_plan", "emit", "await_checkpoints", "verify",
    }
    migrate = bag.get_dag("ballast_migrate")
    assert migrate.schedule is None or str(migrate.timetable.summary) in ("None", "")


def test_one_rebalance_and_one_supervise_dag_per_job(airflow_db, tmp_path, monkeypatch):
    from airflow.dag_processing.dagbag import DagBag

    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(TWO_JOBS)
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(jobs))
    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    per_job = {d for d in bag.dag_ids if d.startswith(("ballast_rebalance", "ballast_supervise"))}
    assert per_job == {"ballast_rebalance__clicks", "ballast_rebalance__orders",
                       "ballast_supervise__clicks", "ballast_supervise__orders"}
    for job in ("clicks", "orders"):
        for kind in ("rebalance", "supervise"):
            dag = bag.get_dag(f"ballast_{kind}__{job}")
            assert dag.max_active_runs == 1
            assert {"ballast", kind, f"job:{job}"} <= set(dag.tags)
            # a job's DAG drives only that job
            assert all(t.op_kwargs.get("job", job) == job for t in dag.tasks if hasattr(t, "op_kwargs"))
    # rebalance: null = no periodic runs; the job's signals still start it
    [signals] = bag.get_dag("ballast_rebalance__orders").schedule
    assert signals.uri == "ballast://orders/signals"
    assert bag.get_dag("ballast_supervise__orders").schedule == "*/1 * * * *"
    migrate = bag.get_dag("ballast_migrate")
    assert migrate.params.get_param("job").schema["enum"] == ["clicks", "orders"]  # single, job is a param
    assert migrate.max_active_runs > 1


def test_plugin_directory_loads_only_the_plugin(airflow_db):
    from airflow._shared.plugins_manager.plugins_manager import _load_plugins_from_plugin_directory

    plugins, errors = _load_plugins_from_plugin_directory(str(REPO / "plugins"))
    assert errors == {}
    assert [p.name for p in plugins] == ["ballast"]
    import sys

    assert not {"config", "emitter", "sensors", "ds2", "protocol"} & set(sys.modules), ".airflowignore not honoured"
    assert plugins[0].fastapi_apps[0]["url_prefix"] == "/ballast"

