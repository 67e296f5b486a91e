"""dags/ballast_migrate.py: a manual migration's form declares every param the DAG reads, refuses a
value outside its schema before a run exists, and runs validate_and_plan -> approve ->
mark_approved -> emit -> await -> verify, with the cancel of an unapproved plan as the teardown.
Parsed as the scheduler does, without running it (runs: test_dags_run.py, test_migrate_approval.py)."""

from __future__ import annotations

import importlib.util
import re
from datetime import timedelta
from pathlib import Path

import pytest

from tests.helpers.dag_bag import dag_bag, edges, run_params

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def _module():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ballast_migrate_dag", REPO / "dags" / "ballast_migrate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def dag(tmp_path_factory):  # type: ignore[no-untyped-def]
    return dag_bag(tmp_path_factory.mktemp("jobs")).dags["ballast_migrate"]


def test_every_migrate_param_that_is_read_is_declared():
    """A key the migrate DAG or plan_manual reads but the form does not declare can only be set by
    hand-written conf JSON: a person using the trigger form would never see it (take_over, force,
    order and byte_budget once were such keys)."""
    from ballast.config import JobConfig

    migrate_params = _module().migrate_params

    declared = set(migrate_params({"clicks": JobConfig(job="clicks", operator="keycount",
                                                       input_topic="clicks")}))
    read: set[str] = set()
    for path in (REPO / "dags" / "ballast_migrate.py", REPO / "plugins" / "ballast" / "control" / "manual.py"):
        src = path.read_text()
        read |= set(re.findall(r'params\.get\("([a-z_]+)"', src)) | set(re.findall(r'params\["([a-z_]+)"\]', src))
    assert read, "the scan found no params reads: the pattern no longer matches the code"
    assert read <= declared, f"read but not declared as Params: {sorted(read - declared)}"


def test_the_tasks_run_in_order_and_an_unapproved_plan_is_cancelled_at_the_end(dag):
    assert edges(dag) >= {("validate_and_plan", "approve"), ("approve", "mark_approved"),
                          ("mark_approved", "emit"), ("emit", "await_checkpoints"),
                          ("await_checkpoints", "verify"), ("verify", "cancel_unapproved"),
                          ("validate_and_plan", "cancel_unapproved")}
    cancel = dag.get_task("cancel_unapproved")
    assert cancel.is_teardown and dag.get_task("validate_and_plan").is_setup
    assert cancel.trigger_rule == "all_done_setup_success", "it runs whatever the approval's outcome"
    approve = dag.get_task("approve")
    assert approve.defaults == ["Reject"] and approve.response_timeout == timedelta(hours=1)
    assert dag.schedule is None and dag.dagrun_timeout == timedelta(hours=6) and dag.tags == {"ballast"}


def test_the_approvals_wait_leaves_the_migration_the_rest_of_the_run():
    mod = _module()
    dag = mod.make_dag({}, approval_timeout=timedelta(seconds=3))
    assert dag.get_task("approve").response_timeout == timedelta(seconds=3)
    assert mod.DAGRUN_TIMEOUT - mod.APPROVAL_TIMEOUT == timedelta(hours=5)


def test_the_form_defaults_to_a_dry_run_of_the_first_job(dag):
    got = run_params(dag, {})
    assert got["job"] == "clicks" and got["dry_run"] is True and got["strategy"] == "auto"
    assert got["move_mode"] == "auto", "each bin's mode by the cost model unless a person forces one"
    assert got["moves"] == [] and got["target_workers"] is None and got["force"] is False
    assert got["trigger_ms"] is None and got["max_records_per_epoch"] is None, "settings change only when asked"
    assert dag.params.get_param("job").schema["enum"] == ["clicks", "orders"]
    ok = run_params(dag, {"job": "orders", "operator": "counts", "moves": [{"bin": 3, "to": 1}], "gap_seconds": 2,
                          "order": "hot-first", "split_to": 512, "dry_run": False, "move_mode": "handover"})
    assert ok["moves"] == [{"bin": 3, "to": 1}] and ok["operator"] == "counts" and ok["move_mode"] == "handover"
    assert dag.params.get_param("move_mode").schema["enum"] == ["auto", "transfer", "precopy", "handover"]


@pytest.mark.parametrize("conf, why", [
    ({"strategy": "sideways"}, "not one of"),
    ({"step_size": 0}, "less than the minimum"),
    ({"moves": [{"bin": 1}]}, "'to' is a required property"),
    ({"moves": [{"bin": -1, "to": 0}]}, "less than the minimum"),
    ({"moves": [{"bin": 1, "to": 0, "from": 2}]}, "Additional properties are not allowed"),
    ({"job": "no-such-job"}, "not one of"),
    ({"gap_seconds": "soon"}, "not of type"),
    ({"gap_seconds": 7200}, "greater than the maximum"),
    ({"target_workers": 0}, "less than the minimum"),
    ({"target_workers": 2000}, "greater than the maximum"),
    ({"split_to": 1}, "less than the minimum"),
    ({"trigger_ms": -1}, "less than the minimum"),
    ({"trigger_ms": 3_600_001}, "greater than the maximum"),
    ({"max_records_per_epoch": -1}, "less than the minimum"),
    ({"max_records_per_epoch": "1k"}, "not of type"),
    ({"order": "random"}, "not one of"),
    ({"emit_mode": "all"}, "not one of"),
    ({"move_mode": "teleport"}, "not one of"),
    ({"move_mode": None}, "not one of"),
    ({"reason": "x" * 501}, "is too long"),
    ({"dry_run": "no"}, "not of type 'boolean'"),
])
def test_a_value_outside_its_schema_is_refused_before_the_run(dag, conf, why):
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match=why):
        run_params(dag, conf)


def test_without_jobs_the_form_still_builds_and_asks_for_a_job():
    from airflow.sdk.exceptions import ParamValidationError

    dag = _module().make_dag({})
    assert "enum" not in dag.params.get_param("job").schema
    with pytest.raises(ParamValidationError, match="job"):
        run_params(dag, {})


def test_the_approver_reads_the_stored_plan_its_deadline_and_what_silence_means():
    body = _module()._approval_body("p-1", "clicks", "step 1: 3:0->1", "within 5 min", timedelta(hours=1))
    assert "**Job** `clicks`" in body and "**plan** `p-1`" in body
    assert "```\nstep 1: 3:0->1\n```" in body and "**Deadline once approved:** within 5 min" in body
    assert "no answer within 1:00:00 — cancels it; nothing is sent" in body
