"""The DAGs run under `dag.test()`: manual params validated, dry run, a request whose gaps cannot
meet the deadline refused, a scheduled rebalance end to end (with the reference step applier
answering on the real broker), and a timed-out plan failing cleanly. The manual migration's
approval (a person answering through the REST API) is in test_migrate_approval.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ballast import store
from ballast.config import load_jobs
from ballast.emitter import ensure_control_topics
from tests.helpers.stepapplier import StepApplier, seed_job

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]


def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"test_{name}", REPO / "dags" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@pytest.fixture
def env(airflow_db, kafka_bootstrap, db_url, jobs_file, unique_name, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", kafka_bootstrap)
    jobs_file(bins=16, timeout=60)
    seed_job(db_url, unique_name, bins=16)
    ensure_control_topics(kafka_bootstrap, unique_name)
    return unique_name


def _rebalance(job: str):  # type: ignore[no-untyped-def]
    return _load("ballast_rebalance").make_dag(load_jobs()[job], None)


def _states(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id.split(".")[-1]: str(ti.state) for ti in dr.get_task_instances()}


@pytest.mark.parametrize("conf, why", [
    ({"strategy": "sideways"}, "not one of"),
    ({"step_size": 0}, "less than the minimum"),
    ({"moves": [{"bin": 1}]}, "'to' is a required property"),
    ({"moves": [{"bin": -1, "to": 0}]}, "less than the minimum"),
    ({"job": "no-such-job"}, "not one of"),
    ({"gap_seconds": "soon"}, "not of type"),
])
def test_invalid_manual_params_are_rejected_before_the_run(env, conf, why):
    from airflow.exceptions import ParamValidationError

    dag = _load("ballast_migrate").make_dag(load_jobs())
    with pytest.raises(ParamValidationError, match=why):
        dag.test(run_conf={"job": env, **conf})


def _output(caplog, capfd) -> str:  # type: ignore[no-untyped-def]
    """What a task printed or logged (dag.test runs it in process)."""
    out, err = capfd.readouterr()
    return caplog.text + out + err


def test_manual_dry_run_prints_the_plan_and_emits_nothing(env, db_url, caplog, capfd):
    dag = _load("ballast_migrate").make_dag(load_jobs())
    dr = dag.test(run_conf={"job": env, "target_workers": 2, "strategy": "batched", "dry_run": True})
    assert _states(dr)["validate_and_plan"] == "skipped"
    assert _states(dr)["emit"] == "skipped"
    assert _states(dr)["approve"] == "skipped"
    assert store.recent_plans(db_url, job=env) == []
    text = _output(caplog, capfd)
    assert "predicted duration" in text and "deadline once approved" in text


def test_manual_request_whose_gaps_cannot_fit_is_refused_unstored(env, db_url, kafka_bootstrap, caplog, capfd):
    dag = _load("ballast_migrate").make_dag(load_jobs())
    applier = StepApplier(kafka_bootstrap, db_url, env)
    applier.start()
    try:
        # 8 one-bin steps with an hour between them cannot end within the DAG's 5 h after approval
        dr = dag.test(run_conf={"job": env, "target_workers": 2, "strategy": "fluid", "gap_seconds": 3600,
                                "dry_run": False})
    finally:
        applier.stop()
    states = _states(dr)
    assert states["validate_and_plan"] == "failed" and states["approve"] == "upstream_failed", states
    assert store.recent_plans(db_url, job=env) == []
    assert applier.seen == []
    text = _output(caplog, capfd)
    assert "nothing was stored or sent" in text and "lower gap_seconds to at most" in text


def test_manual_request_naming_both_workers_and_moves_fails_first_task(env, db_url):
    dag = _load("ballast_migrate").make_dag(load_jobs())
    dr = dag.test(run_conf={"job": env, "target_workers": 2, "moves": [{"bin": 1, "to": 1}], "dry_run": False})
    assert _states(dr)["validate_and_plan"] == "failed"
    assert _states(dr)["emit"] in ("upstream_failed", "skipped")
    assert store.recent_plans(db_url, job=env) == []


def test_scheduled_rebalance_scales_up_by_batched_migration(env, db_url, kafka_bootstrap):
    dag = _rebalance(env)
    applier = StepApplier(kafka_bootstrap, db_url, env)
    applier.start()
    try:
        dr = dag.test()
    finally:
        applier.stop()
    assert set(_states(dr).values()) == {"success"}, _states(dr)
    plan = store.recent_plans(db_url, job=env)[0]
    # 15k rows/s on 10k rows/s workers, sized for the 0.7 target utilization (+ batch overhead): 3
    assert plan.status == "completed" and plan.strategy == "batched" and plan.target_workers == 3
    cur = store.latest_map(db_url, env, "keycount")
    assert cur.map_version == plan.steps and list(cur.assignment) == list(plan.target_assignment)
    assert len(store.checkpoints(db_url, plan.plan_id)) == plan.steps
    d = store.latest_decision(db_url, env, "keycount")
    assert d.action == "scale_up" and d.target_workers == 3 and d.plan_id == plan.plan_id
    # batched (Megaphone): with one sender, every step moves exactly one bin
    assert all(len(s.payload["moves"]) == 1 for s in store.plan_steps(db_url, plan.plan_id))
    # the run links back to the console page of its plan (the "Ballast plan" link of emit and await)
    assert _links(dr) == {"emit": f"/ballast/?plan={plan.plan_id}",
                          "await_checkpoints": f"/ballast/?plan={plan.plan_id}"}


def _links(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The "Ballast plan" links the run's tasks stored (Airflow keeps extra links as XCom)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(select(XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dr.dag_id, XComModel.run_id == dr.run_id,
            XComModel.key == "_link_ConsolePlanLink")).all()
    return {t: v for t, v in rows}


def test_rebalance_timeout_fails_plan_and_stops_emitting(env, db_url, kafka_bootstrap, jobs_file):
    jobs_file(bins=16, timeout=3)
    dag = _rebalance(env)
    applier = StepApplier(kafka_bootstrap, db_url, env, hold_steps={2})  # the job stops answering at step 2
    applier.start()
    try:
        dr = dag.test()
    finally:
        applier.stop()
    states = _states(dr)
    assert states["emit"] == "failed" and states["verify"] in ("upstream_failed", "skipped"), states
    plan = store.recent_plans(db_url, job=env)[0]
    assert plan.status == "failed" and "timed out" in plan.reason
    assert [s for _, s, _ in applier.seen] == [1, 2], "nothing after the stuck step may be emitted"
    ev = store.events(db_url, env, kind="plan_timeout")[0]
    assert "Step(s) [2] were emitted but have no checkpoint" in ev.message


def test_rebalance_with_no_need_records_a_no_change_decision(env, db_url, unique_name):
    # a second job that keeps up easily: 5k rows/s on a 10k rows/s worker is within the band? no:
    # utilization 0.5/0.9 ~ 0.56 is inside 0.7 +- 0.2, so the decision is "no change"
    from migrations_db import models as m
    from migrations_db.db import session_scope

    with session_scope(db_url) as s:
        for row in s.query(m.EpochMetrics).filter_by(job=env):
            row.input_rate = 5000.0
    dag = _rebalance(env)
    dr = dag.test()
    assert _states(dr)["place_and_plan"] == "skipped"
    d = store.latest_decision(db_url, env, "keycount")
    assert d.action == "no_change" and "utilization" in d.reason and d.plan_id is None
    assert store.recent_plans(db_url, job=env) == []


def test_manual_run_addresses_a_chain_operator_by_name(airflow_db, db_url, tmp_path, unique_name, monkeypatch,
                                                       caplog, capfd):
    """`operator` picks which operator of a chain moves: the dry run plans against that operator's
    map (here 2 workers -> 3), and a name the job does not have fails the first task, storing nothing."""
    job = unique_name
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n  - job: {job}\n    input_topic: {job}.in\n    bins: 16\n    max_workers: 4\n"
                    "    operators:\n      - {name: split, operator: wordcount}\n"
                    "      - {name: counts, operator: keycount}\n")
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(path))
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    seed_job(db_url, job, bins=16, workers=1, operator="split")
    seed_job(db_url, job, bins=16, workers=2, operator="counts")
    dag = _load("ballast_migrate").make_dag(load_jobs())
    dr = dag.test(run_conf={"job": job, "operator": "counts", "target_workers": 3, "strategy": "batched",
                            "dry_run": True})
    assert _states(dr)["validate_and_plan"] == "skipped"
    text = _output(caplog, capfd)
    assert "workers 2->3" in text, text[-3000:]  # counts' map; split's would say 1->3
    dr = dag.test(run_conf={"job": job, "operator": "nope", "target_workers": 2, "dry_run": False})
    assert _states(dr)["validate_and_plan"] == "failed"
    assert "has no operator 'nope'" in _output(caplog, capfd)
    assert store.recent_plans(db_url, job=job) == []
