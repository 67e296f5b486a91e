"""A hot key on a real job, handled by the scheduled rebalance alone: one key carries 20 % of the
load on 4 workers over 8 bins, so its bin (and the bin sharing its worker) leaves that worker at
~1.6x the mean and no placement of 8 bins can do better than 1.2x. The first rebalance run splits
(8 -> 32 bins, nothing moves); the second places the parts; the workers' measured loads end near
even."""

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
BINS, WORKERS, HOT_SHARE = 8, 4, 0.2


def _skew(url: str, job: str, map_version: int, n: int = 4) -> float | None:
    """max/mean of the workers' records over `n` loaded epochs under `map_version` (None: not yet)."""
    eps = [e.epoch for e in store.epoch_window(url, job, "keycount", 40) if e.map_version == map_version
           and e.input_rows][-n:]
    if len(eps) < n:
        return None
    per = [0] * WORKERS
    for w in store.worker_window(url, job, "keycount", eps):
        per[w.worker] += w.records_in
    return max(per) / (sum(per) / WORKERS)


def test_scheduled_rebalance_splits_a_hot_bin_then_balances_its_parts(spark, kafka_bootstrap, make_topics,
                                                                       unique_name, tmp_path, db_url, airflow_db,
                                                                       monkeypatch):
    job = unique_name
    make_topics({f"{job}.in": 2})
    jobs = write_jobs_file(tmp_path / "jobs.yaml", job, BINS, min_workers=WORKERS, initial_workers=WORKERS,
                           max_workers=WORKERS, rebalance={"window_epochs": 4, "skew_threshold": 0.1,
                                                           "await_timeout_s": 240, "poll_interval_s": 0.5})
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(jobs))
    monkeypatch.setenv("BALLAST_DB_URL", db_url)
    monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", kafka_bootstrap)
    cfg = load_jobs()[job]
    load = Load(kafka_bootstrap, f"{job}.in", hot_share=HOT_SHARE)
    runner = start_job(spark, RunConfig(job=job, input_topic=f"{job}.in", checkpoint_dir=str(tmp_path / "ckpt"),
                                        bootstrap=kafka_bootstrap, db_url=db_url, bins=BINS, workers=WORKERS,
                                        trigger_ms=500))
    load.start()
    try:
        before = wait_until(lambda: _skew(db_url, job, 0), 240, "four loaded epochs under the first map")
        assert before > 1.4, f"the hot key's worker should carry ~1.6x the mean, got {before:.2f}"

        dr = rebalance_dag(cfg, "hot_rebalance").test()  # run 1: the hot bin bounds every placement -> split
        d = store.latest_decision(db_url, job, "keycount")
        assert d.action == "split", d.reason
        split = store.recent_plans(db_url, job=job)[0]
        states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
        assert split.status == "completed" and split.steps == 1, states
        after_split = store.latest_map(db_url, job, "keycount")
        assert after_split.bins == 32 and after_split.workers == WORKERS
        wait_until(lambda: _skew(db_url, job, after_split.map_version), 240, "four loaded epochs at 32 bins")

        rebalance_dag(cfg, "hot_rebalance").test()  # run 2: placement at 32 bins moves the hot bin's cold parts away
        d = store.latest_decision(db_url, job, "keycount")
        assert d.action == "rebalance", d.reason
        final = store.latest_map(db_url, job, "keycount")
        assert final.map_version > after_split.map_version and final.bins == 32
        skew = wait_until(lambda: _skew(db_url, job, final.map_version), 240, "four loaded epochs after placing")
    finally:
        load.stop.set()
        load.join(timeout=30)
        runner.stop()
    assert skew < 1.25 and skew < before - 0.3, f"max/mean {before:.2f} -> {skew:.2f}"
    print(f"worker load max/mean: {before:.2f} at 8 bins -> {skew:.2f} after split and placement")
