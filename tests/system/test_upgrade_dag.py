"""The ballast_upgrade DAG against a real job (Airflow's dag.test, real Kafka, Spark and SQLite): a
version that does not import fails the run with the job's reason and leaves version 1 running; a
good one, shipped by the run's py_files, is applied, its checkpoint recorded like any step's, and
the job's next outputs come from it. (A version with the same state needs an empty StateUpgrade.)"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ballast import store
from ballast.config import load_jobs
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dp_helpers import consumed_rows, produce
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
OPERATOR = "upgrade_counter:Counter"

V2 = '''
from spark_jobs.processor import StatefulProcessor, StateUpgrade


class Counter(StatefulProcessor):
    ballast_version = "2"
    ballast_upgrades = (StateUpgrade("1", "2"),)  # the same state, carried as it is

    def init(self, handle):
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key, rows, timer_values):
        n = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((n,))
        yield {"key": key[0], "count": n, "v": "2"}
'''


def _states(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def test_the_upgrade_dag_deploys_a_version_and_fails_with_the_jobs_reason(
        airflow_db, spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, monkeypatch, caplog, capfd):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    spark.sparkContext.addPyFile(str(HERE / "upgrade_counter.py"))
    sys.path.insert(0, str(HERE))
    mod = f"counter_v2_{job.replace('-', '_').replace('.', '_')}"
    v2 = tmp_path / "code" / f"{mod}.py"
    v2.parent.mkdir()
    v2.write_text(V2)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(f"jobs:\n  - {{job: {job}, operator: '{OPERATOR}', input_topic: {topic}, bins: 8, "
                    "initial_workers: 2, max_workers: 2, rebalance: {await_timeout_s: 120, poll_interval_s: 0.5}}\n")
    for k, v in {"BALLAST_JOBS_FILE": str(jobs), "BALLAST_DB_URL": db_url,
                 "BALLAST_KAFKA_BOOTSTRAP": kafka_bootstrap}.items():
        monkeypatch.setenv(k, v)
    spec = importlib.util.spec_from_file_location("upgrade_dag_under_test", REPO / "dags" / "ballast_upgrade.py")
    dag_mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(dag_mod)  # type: ignore[union-attr]
    dag = dag_mod.make_dag(load_jobs())
    cfg = RunConfig(job=job, operator=OPERATOR, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"),
                    bootstrap=kafka_bootstrap, db_url=db_url, bins=8, workers=2, trigger_ms=200)
    ckpt = cfg.checkpoint_dir + "/spark"
    keys = [b"k%02d" % (i % 20) for i in range(400)]
    runner = start_job(spark, cfg)
    try:
        produce(kafka_bootstrap, topic, keys[:200], 2)
        wait_until(lambda: consumed_rows(ckpt, topic) == 200, 180, "the first half consumed")
        dr = dag.test(run_conf={"job": job, "code": "no_such_module_x:Counter", "version": "2", "dry_run": False})
        states = _states(dr)
        # the emit task's inline wait sees the rejection (else verify would): the run fails, the plan too
        assert states["validate_and_plan"] == "success" and "failed" in states.values(), states
        assert store.recent_plans(db_url, job=job)[0].status == "failed"
        out, err = capfd.readouterr()
        assert "does not import" in caplog.text + out + err, "the run says why the job refused it"
        dr = dag.test(run_conf={"job": job, "code": f"{mod}:Counter", "version": "2", "py_files": [str(v2)],
                                "dry_run": False, "reason": "ship v2"})
        assert set(_states(dr).values()) == {"success"}, _states(dr)
        plan = store.recent_plans(db_url, job=job)[0]
        cp = store.checkpoints(db_url, plan.plan_id)[1]
        assert plan.status == "completed" and cp.status == "applied"
        produce(kafka_bootstrap, topic, keys[200:], 2)
        wait_until(lambda: consumed_rows(ckpt, topic) == 400, 180, "the second half consumed")
    finally:
        runner.stop()
    rows = [(o.epoch, json.loads(o.value)) for o in read_output(kafka_bootstrap, f"{job}.output")[0]]
    after = [r for e, r in rows if e >= cp.applied_epoch]
    assert after and {r["v"] for r in after} == {"2"} and {r["v"] for e, r in rows if e < cp.applied_epoch} == {"1"}
    last = {r["key"]: r["count"] for _, r in sorted(rows, key=lambda x: x[0])}
    assert last == {f"k{i:02d}": 20 for i in range(20)}, "the counts went on across the upgrade"
