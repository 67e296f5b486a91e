"""dags/ballast_rebalance.py: one DAG per job of the jobs file, on its schedule, one run at a time;
collect -> evaluate -> place_and_plan -> emit -> await_checkpoints -> verify for each operator (a
chain: one task group per operator, each bound to its operator), polling at the job's interval.
Parsed as the scheduler does, without running it (runs: test_dags_run.py)."""

from __future__ import annotations

import importlib.util
import inspect
from datetime import timedelta

import pytest

from tests.helpers.dag_bag import REPO, dag_bag, edges

pytestmark = pytest.mark.controlplane
STAGES = ("collect", "evaluate", "place_and_plan", "emit", "await_checkpoints", "verify")


@pytest.fixture(scope="module")
def bag(tmp_path_factory):  # type: ignore[no-untyped-def]
    return dag_bag(tmp_path_factory.mktemp("jobs"))


def _chain(prefix: str = "") -> set[tuple[str, str]]:
    ids = [prefix + s for s in STAGES]
    return set(zip(ids, ids[1:])) | {(prefix + "collect", prefix + "place_and_plan")}


def test_one_dag_per_job_named_after_it_on_the_files_schedule(bag):
    ids = {d for d in bag.dag_ids if d.startswith("ballast_rebalance")}
    assert ids == {"ballast_rebalance__clicks", "ballast_rebalance__orders"}
    for job in ("clicks", "orders"):
        dag = bag.dags[f"ballast_rebalance__{job}"]
        # the file's cron OR the job's signals (an asset watched on <job>.signals)
        sched = dag.schedule
        assert sched.timetable.expression == "*/7 * * * *" and dag.max_active_runs == 1 and not dag.catchup
        [asset] = sched.asset_condition.objects
        [watcher] = asset.watchers
        assert asset.name == f"ballast_signals__{job}" and watcher.trigger.topics == [f"{job}.signals"]
        assert watcher.trigger.apply_function == "ballast.watch.accept_signal"
        assert watcher.trigger.kafka_config_id == "ballast_kafka_watch"
        assert dag.dagrun_timeout == timedelta(hours=2) and dag.tags == {"ballast", "rebalance", f"job:{job}"}


def test_signals_off_keep_the_cron_and_a_null_cron_leaves_the_signals(tmp_path):
    from ballast.config import load_jobs

    spec = importlib.util.spec_from_file_location("rebalance_dag", REPO / "dags" / "ballast_rebalance.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text("jobs:\n  - {job: quiet, operator: keycount, input_topic: q.in, rebalance: {signal_epochs: 0}}\n"
                    "  - {job: loud, operator: keycount, input_topic: l.in}\n")
    cfgs = load_jobs(jobs)
    assert mod.dag_schedule(cfgs["quiet"], "*/2 * * * *") == "*/2 * * * *"
    assert mod.dag_schedule(cfgs["quiet"], None) is None  # manual runs only
    [asset] = mod.dag_schedule(cfgs["loud"], None)  # no periodic runs: the signals only
    assert asset.uri == "ballast://loud/signals"


def test_a_job_is_collected_decided_planned_emitted_awaited_and_verified_in_that_order(bag):
    dag = bag.dags["ballast_rebalance__clicks"]
    assert {t.task_id for t in dag.tasks} == set(STAGES)
    assert edges(dag) >= _chain()
    for task in ("collect", "evaluate", "place_and_plan"):
        params = inspect.signature(dag.get_task(task).python_callable).parameters
        assert (params["job"].default, params["op"].default) == ("clicks", "keycount")
    assert dag.get_task("emit").poll_interval == 0.5 and dag.get_task("await_checkpoints").poke_interval == 0.5
    for task in ("emit", "await_checkpoints"):
        assert dag.get_task(task).plan_id.operator.task_id == "place_and_plan", "the plan the planner stored"


def test_each_operator_of_a_chain_has_its_own_group(bag):
    dag = bag.dags["ballast_rebalance__orders"]
    assert {t.task_id for t in dag.tasks} == {f"{op}.{s}" for op in ("split", "counts") for s in STAGES}
    for op in ("split", "counts"):
        assert edges(dag) >= _chain(f"{op}.")
        params = inspect.signature(dag.get_task(f"{op}.evaluate").python_callable).parameters
        assert (params["job"].default, params["op"].default) == ("orders", op)
    assert not {(a, b) for a, b in edges(dag) if a.split(".")[0] != b.split(".")[0]}, "the groups run apart"


def test_a_null_schedule_is_manual_only():
    spec = importlib.util.spec_from_file_location("ballast_rebalance_dag", REPO / "dags" / "ballast_rebalance.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from ballast.config import JobConfig

    dags = mod.make_dags({"a": JobConfig(job="a", operator="keycount", input_topic="a",
                                         rebalance={"signal_epochs": 0})}, None)  # type: ignore[arg-type]
    assert list(dags) == [mod.dag_id("a")] == ["ballast_rebalance__a"] and dags["ballast_rebalance__a"].schedule is None
