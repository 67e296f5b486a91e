"""ballast.control.upgrade: a person's upgrade request is checked for its form and against the job
(a processor, no open plan, a report to plan from) before anything is stored; a dry run stores
nothing; the stored plan is one upgrade step whose control message the job parses back with its
code. On a real migrated SQLite metrics DB. (The code itself is judged by the job:
tests/system/test_live_upgrade.py.)"""

from __future__ import annotations

import json

import pytest

from ballast import store
from ballast.code_version import CodeVersion
from ballast.config import get_job
from ballast.control.manual import InvalidRequest
from ballast.control.upgrade import plan_upgrade
from ballast.protocol import parse_control
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane

PROCESSOR = "pkg.counter_v1:Counter"  # the control side never imports a processor it upgrades


@pytest.fixture
def processor_job(db_url, jobs_file, unique_name):  # type: ignore[no-untyped-def]
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16, operator=PROCESSOR)
    return get_job(unique_name).model_copy(update={"operator": PROCESSOR})


GOOD = {"code": "pkg.counter_v2:Counter", "version": "2", "py_files": ["/srv/code/counter_v2.py"]}


@pytest.mark.parametrize("params, why", [
    ({**GOOD, "strategy": "sideways"}, r"strategy must be one of \('direct', 'shadow'\)"),
    ({**GOOD, "strategy": "shadow", "shadow_epochs": 0}, "shadow.epochs must be an integer in 1..1000"),
    ({**GOOD, "strategy": "shadow", "tolerance": 2}, "shadow.tolerance must be a share in 0..1"),
    ({**GOOD, "code": "counter_v2"}, "package.module:Class"),
    ({**GOOD, "version": ""}, "code version must be a label"),
    ({**GOOD, "version": "2 final"}, "code version must be a label"),
    ({**GOOD, "py_files": ["/srv/code/counter_v2.txt"]}, "each py_file must be a path ending in"),
])
def test_a_malformed_request_is_refused_and_stores_nothing(db_url, processor_job, params, why):
    with pytest.raises(InvalidRequest, match=why):
        plan_upgrade(db_url, processor_job, {**params, "dry_run": False})
    assert not store.open_plans(db_url, processor_job.job, processor_job.operator)


def test_a_shipped_operator_takes_no_upgrade(db_url, job):
    with pytest.raises(InvalidRequest, match="only a stateful processor"):
        plan_upgrade(db_url, job, {**GOOD, "dry_run": True})


def test_the_plan_is_one_upgrade_step_the_job_parses_back_and_an_open_plan_blocks_another(db_url, processor_job):
    dry = plan_upgrade(db_url, processor_job, {**GOOD, "dry_run": True})
    assert dry["plan_id"] is None and "version 2 (pkg.counter_v2:Counter)" in dry["rendered"]
    assert not store.open_plans(db_url, processor_job.job, processor_job.operator), "a dry run stores nothing"
    out = plan_upgrade(db_url, processor_job, {**GOOD, "dry_run": False, "reason": "fix the tally"})
    [step] = store.plan_steps(db_url, out["plan_id"])
    sent = parse_control(json.dumps(step.payload))  # what the emitter sends, as the job parses it
    assert sent.kind == "upgrade" and sent.moves == () and sent.map_version == 0 and sent.workers == 1
    assert sent.code == CodeVersion("pkg.counter_v2:Counter", "2", ("/srv/code/counter_v2.py",))
    assert sent.reason == "fix the tally" and sent.operator == PROCESSOR
    plan = store.get_plan(db_url, out["plan_id"])
    assert plan.target_workers == plan.source_workers and list(plan.target_assignment) == [0] * 16
    with pytest.raises(InvalidRequest, match=out["plan_id"]):
        plan_upgrade(db_url, processor_job, {**GOOD, "version": "3", "dry_run": False})


def test_a_shadow_upgrade_carries_how_it_is_tried_to_the_job(db_url, processor_job):
    from ballast.code_version import ShadowSpec

    out = plan_upgrade(db_url, processor_job, {**GOOD, "strategy": "shadow", "shadow_epochs": 4, "tolerance": 0.01,
                                               "compare_fields": ["key", "count"], "dry_run": False})
    assert "runs beside the version in force for 4 epochs" in out["rendered"] and "key, count" in out["rendered"]
    [step] = store.plan_steps(db_url, out["plan_id"])
    sent = parse_control(json.dumps(step.payload))
    assert sent.code is not None and sent.code.shadow == ShadowSpec(4, 0.01, ("key", "count"))


def test_the_console_shows_the_step_its_shadows_progress_and_the_version_in_force(db_url, processor_job):
    """While the job compares a shadow, the plan's step row shows the version it deploys and what the job
    last said of it; once applied, the job row names the version in force (the command line's before)."""
    from datetime import UTC, datetime

    from ballast import console, console_plans
    from ballast.store import writer
    from tests.helpers.stepapplier import apply_step
    from tests.helpers.store_seed import Entry

    job, op = processor_job.job, processor_job.operator
    [row] = [r for r in console.jobs(db_url) if (r["job"], r["operator"]) == (job, op)]
    assert row["version"] is None, "no upgrade applied: the command line's version"
    out = plan_upgrade(db_url, processor_job, {**GOOD, "strategy": "shadow", "shadow_epochs": 2,
                                               "compare_fields": ["key", "count"], "dry_run": False})
    plan_id = out["plan_id"]
    store.mark_step_emitted(db_url, plan_id, 1, datetime.now(UTC), 0, 7)
    note = "shadow: 1 of 2 epochs with input, 40 handler calls compared, 0 differ, 0 raised"
    writer.write_step_decisions(db_url, job, op, 9, [Entry(0, plan_id, 1, "queue", note, operator=op)])
    [step] = console_plans.plan(db_url, plan_id)["step_rows"]
    assert step["status"] == "in flight" and step["reason"] == note
    assert step["code"]["version"] == "2" and step["code"]["shadow"]["epochs"] == 2
    sent = parse_control(json.dumps(store.plan_steps(db_url, plan_id)[0].payload))
    assert apply_step(db_url, job, op, sent) is not None
    [row] = [r for r in console.jobs(db_url) if (r["job"], r["operator"]) == (job, op)]
    assert row["version"] == {"version": "2", "ref": "pkg.counter_v2:Counter"}
