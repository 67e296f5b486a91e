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
    ({**GOOD, "strategy": "shadow"}, r"strategy must be one of \('direct',\)"),
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
