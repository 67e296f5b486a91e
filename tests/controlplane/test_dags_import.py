"""The DAG folder imports with no errors, and the plugin loads."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def test_dag_folder_imports_without_errors(airflow_db):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert {"ballast_supervise", "ballast_rebalance", "ballast_migrate"} <= set(bag.dag_ids)
    rebalance = bag.get_dag("ballast_rebalance")
    assert rebalance.max_active_runs == 1
    assert {t.task_id for t in rebalance.tasks} >= {
        "clicks.collect", "clicks.evaluate", "clicks.place_and_plan", "clicks.emit",
        "clicks.await_checkpoints", "clicks.verify",
    }
    assert bag.get_dag("ballast_migrate").schedule is None or str(bag.get_dag("ballast_migrate").timetable.summary) in ("None", "")


def test_plugin_directory_loads_only_the_plugin(airflow_db):
    from airflow._shared.plugins_manager.plugins_manager import _load_plugins_from_plugin_directory

    plugins, errors = _load_plugins_from_plugin_directory(str(REPO / "plugins"))
    assert errors == {}
    assert [p.name for p in plugins] == ["ballast"]
    import sys

    assert not {"config", "emitter", "sensors", "ds2", "protocol"} & set(sys.modules), ".airflowignore not honoured"
    assert plugins[0].fastapi_apps[0]["url_prefix"] == "/ballast"
