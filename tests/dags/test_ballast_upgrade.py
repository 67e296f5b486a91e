"""dags/ballast_upgrade.py: a live code upgrade's form declares every param the DAG and plan_upgrade
read, refuses a value outside its schema before a run exists, defaults to a dry run, and runs
validate_and_plan -> emit -> await_checkpoint -> verify. Parsed as the scheduler does, without
running it (the upgrade itself: tests/system/test_live_upgrade.py)."""

from __future__ import annotations

import importlib.util
import re
from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers.dag_bag import dag_bag, edges, run_params

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dag(tmp_path_factory):  # type: ignore[no-untyped-def]
    return dag_bag(tmp_path_factory.mktemp("jobs")).dags["ballast_upgrade"]


def test_every_param_that_is_read_is_declared():
    from ballast.config import JobConfig

    spec = importlib.util.spec_from_file_location("ballast_upgrade_dag", REPO / "dags" / "ballast_upgrade.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    declared = set(mod.upgrade_params({"clicks": JobConfig(job="clicks", operator="keycount", input_topic="clicks")}))
    read: set[str] = set()
    for path in (REPO / "dags" / "ballast_upgrade.py", REPO / "plugins" / "ballast" / "control" / "upgrade.py"):
        src = path.read_text()
        read |= set(re.findall(r'params\.get\("([a-z_]+)"', src)) | set(re.findall(r'params\["([a-z_]+)"\]', src))
    assert {"code", "version", "py_files", "strategy", "dry_run", "shadow_epochs", "tolerance",
            "compare_fields"} <= read, "the scan no longer matches the code"
    assert read <= declared, f"read but not declared as Params: {sorted(read - declared)}"


def test_the_tasks_run_in_order_and_the_form_defaults_to_a_dry_run(dag):
    assert edges(dag) == {("validate_and_plan", "emit"), ("emit", "await_checkpoint"),
                          ("await_checkpoint", "verify"), ("validate_and_plan", "verify"),
                          ("validate_and_plan", "await_checkpoint")}
    assert dag.schedule is None and dag.dagrun_timeout == timedelta(hours=1) and dag.tags == {"ballast"}
    got = run_params(dag, {"code": "pkg.counter_v2:Counter", "version": "2"})
    assert got["dry_run"] is True and got["strategy"] == "direct" and got["py_files"] == []
    assert got["job"] == "clicks" and dag.params.get_param("job").schema["enum"] == ["clicks", "orders"]


@pytest.mark.parametrize("conf, why", [
    ({}, "code"),
    ({"code": "counter_v2", "version": "2"}, "does not match"),
    ({"code": "pkg.counter_v2:Counter", "version": "2 final"}, "does not match"),
    ({"code": "pkg.counter_v2:Counter", "version": ""}, "non-empty"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "strategy": "sideways"}, "not one of"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "shadow_epochs": 0}, "less than the minimum"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "tolerance": 1.5}, "greater than the maximum"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "compare_fields": ["a b"]}, "does not match"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "py_files": "/a.py"}, "not of type 'array'"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "py_files": ["/a.py"] * 17}, "too long"),
    ({"code": "pkg.counter_v2:Counter", "version": "2", "job": "no-such-job"}, "not one of"),
])
def test_a_value_outside_its_schema_is_refused_before_the_run(dag, conf, why):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=why):
        run_params(dag, conf)
