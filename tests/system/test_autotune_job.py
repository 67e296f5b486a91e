"""Autotuning on a real job, through a real rebalance DAG run (Airflow's dag.test, real Kafka, Spark
and SQLite): the key count runs at a 200 ms trigger under ~1 500 rows/s with a 15 s p99 goal and a
fixed worker count. The goal is far from the job on purpose: beside the rest of the suite a clean-clone
run measured 1.85 s of overhead per epoch (slowest epoch 1.74x the median), which puts a 6 s goal out
of reach at W = 2, and the tuner rightly said so (scaling is DS2's decision); this test is about the
step toward a reachable goal. The run keeps W and decides `tune`: one settings step, which the job applies
by restarting its query in its own process; the job then runs at the advised interval (the first
bounded step, 4x), its epochs start that far apart, and the controller reads the new settings."""

from __future__ import annotations

import pytest

from ballast import store
from ballast.config import load_jobs
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dag_bag import rebalance_dag
from tests.helpers.jobs import write_jobs_file
from tests.helpers.key_load import Load
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.dataplane, pytest.mark.slow]
BINS, WORKERS, TRIGGER_MS = 8, 2, 200


def test_a_rebalance_run_tunes_a_real_jobs_trigger_toward_its_latency_goal(spark, kafka_bootstrap, make_topics,
                                                                           unique_name, tmp_path, db_url, airflow_db,
                                                                           monkeypatch):
    job = unique_name
    make_topics({f"{job}.in": 2})
    jobs = write_jobs_file(tmp_path / "jobs.yaml", job, BINS, min_workers=WORKERS, initial_workers=WORKERS,
                           max_workers=WORKERS, rebalance={"window_epochs": 4, "latency_goal_ms": 15_000,
                                                           "await_timeout_s": 240, "poll_interval_s": 0.5})
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(jobs))
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", kafka_bootstrap)
    cfg = load_jobs()[job]
    load = Load(kafka_bootstrap, f"{job}.in")
    runner = start_job(spark, RunConfig(job=job, input_topic=f"{job}.in", checkpoint_dir=str(tmp_path / "ckpt"),
                                        bootstrap=kafka_bootstrap, db_url=db_url, bins=BINS, workers=WORKERS,
                                        trigger_ms=TRIGGER_MS))
    load.start()
    try:
        wait_until(lambda: len([e for e in store.epoch_window(db_url, job, "keycount", 10) if e.input_rows]) >= 4,
                   240, "four loaded epochs")
        assert store.job_settings(db_url, job, "keycount") == (TRIGGER_MS, None)
        dr = rebalance_dag(cfg, "tune_rebalance").test()
        d = store.latest_decision(db_url, job, "keycount")
        states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
        assert d is not None and d.action == "tune", (d.reason if d else None, states)
        advised = int(d.inputs["tune.trigger_ms"])
        # the goal's interval is seconds away: one decision goes x4, or to the keep-up bound if that is more
        assert d.inputs["tune.feasible"] and advised == max(4 * TRIGGER_MS, d.inputs["tune.keep_up_ms"]), d.reason
        plan = store.recent_plans(db_url, job=job)[0]
        assert plan.status == "completed" and plan.steps == 1, states
        assert runner.streaming is not None
        wait_until(lambda: runner.streaming.restarts == 1 and not runner.streaming.replacing.is_set(), 60,
                   "the job's query restarted with the new settings")
        assert runner.streaming.effective is not None and runner.streaming.effective.trigger_ms == advised
        assert store.job_settings(db_url, job, "keycount")[0] == advised
        applied = store.checkpoints(db_url, plan.plan_id)[1].applied_epoch
        assert applied is not None

        def gaps() -> list[float] | None:
            # the epochs after the one Spark re-runs; Ballast's start times add Spark's planning
            # jitter to each trigger tick, so one gap may be short: their mean is what the interval sets
            starts = [e.started_at for e in store.epoch_window(db_url, job, "keycount", 40) if e.epoch > applied + 2]
            if len(starts) < 9:
                return None
            return [(b - a).total_seconds() for a, b in zip(starts, starts[1:], strict=False)]

        after = wait_until(gaps, 180, "nine epochs at the tuned interval")
    finally:
        load.stop.set()
        load.join(timeout=30)
        runner.stop()
    mean_gap = sum(after) / len(after)
    assert mean_gap >= advised / 1000 * 0.8, f"epochs {after} s apart (mean {mean_gap:.2f}) at a {advised} ms trigger"
    print(f"autotune: trigger {TRIGGER_MS} -> {advised} ms; {d.reason}")
