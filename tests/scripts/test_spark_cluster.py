"""The loopback Spark standalone cluster (scripts/spark_cluster.py) with real processes.

Tasks run on executors of different workers, each seeing only its own worker's dirs; a SIGKILLed
executor is relaunched by the master while the app goes on; a worker added to a running cluster
gets an executor of the running app; `stop()` leaves no process of the cluster alive.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scripts.spark_cluster import SparkCluster, pid_alive, wait_until

pytestmark = pytest.mark.cluster

# generous: two cores shared with whatever else the suite runs; an executor JVM takes seconds
APP_TIMEOUT = 300
EXECUTOR_TIMEOUT = 180

SPREAD_APP = """
import json, os, socket, time
from pyspark.sql import SparkSession

sc = SparkSession.builder.getOrCreate().sparkContext

def where(x):
    time.sleep(0.5)  # so both executors get tasks
    return (x, socket.gethostname(), os.getpid(), os.environ.get('SPARK_LOCAL_DIRS'), os.getcwd())

rows = sc.parallelize(range(8), 4).map(where).collect()
print(json.dumps({"app_id": sc.applicationId, "rows": rows}), flush=True)
"""

# small jobs until the stop file exists (or 10 minutes); one JSON line per job: the executors'
# work dirs (<worker work dir>/<app id>/<executor id>) its tasks ran in
LOOP_APP = """
import json, os, sys, time
from pyspark.sql import SparkSession

sc = SparkSession.builder.getOrCreate().sparkContext
stop_file, t0, i = sys.argv[1], time.time(), 0
while not os.path.exists(stop_file) and time.time() - t0 < 600:
    cwds = sc.parallelize(range(4), 4).map(lambda x: (time.sleep(0.2), os.getcwd())[1]).collect()
    print(json.dumps({"i": i, "t": round(time.time() - t0, 1), "app_id": sc.applicationId,
                      "cwds": sorted(set(cwds))}), flush=True)
    i += 1
    time.sleep(0.5)
print(json.dumps({"done": i}), flush=True)
"""

WAIT_ALL_EXECUTORS = {  # the first job waits until every executor has registered
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "180s",
}


def _worker_of(path: str, cluster: SparkCluster) -> int | None:
    for w in cluster.workers:
        if path and Path(path).resolve().is_relative_to(Path(w.dir).resolve()):
            return w.index
    return None


def _app_id(app) -> str:  # type: ignore[no-untyped-def]
    """The app's id, once its first job is done."""
    def first_job() -> str | None:
        if app.proc.poll() is not None:
            raise AssertionError(f"app exited with {app.proc.returncode}:\n{app.tail()}")
        return next((r["app_id"] for r in app.records() if "app_id" in r), None)

    return wait_until(first_job, APP_TIMEOUT, "the app's first job")


def test_tasks_run_on_executors_of_both_workers(spark_cluster: SparkCluster, submit_app) -> None:  # type: ignore[no-untyped-def]
    status = spark_cluster.status()
    assert status["aliveworkers"] == 2 and spark_cluster.alive_cores() == 2
    assert spark_cluster.master_url == f"spark://127.0.0.1:{spark_cluster.port}"
    assert {w.worker_id for w in spark_cluster.workers} == {w["id"] for w in status["workers"]}

    app = submit_app(spark_cluster, SPREAD_APP, conf=WAIT_ALL_EXECUTORS, jars=None)  # with the Kafka jars
    assert app.wait(APP_TIMEOUT) == 0, app.tail()
    [result] = [r for r in app.records() if "rows" in r]
    assert sorted(r[0] for r in result["rows"]) == list(range(8))
    by_local_dirs = {_worker_of(r[3], spark_cluster) for r in result["rows"]}
    by_cwd = {_worker_of(r[4], spark_cluster) for r in result["rows"]}
    assert None not in by_local_dirs | by_cwd, result["rows"]  # every task saw only our workers' dirs
    assert by_local_dirs == by_cwd == {0, 1}, result["rows"]
    for _, _, _, local_dirs, cwd in result["rows"]:  # a task's dirs all belong to one worker
        assert _worker_of(local_dirs, spark_cluster) == _worker_of(cwd, spark_cluster)
    done = wait_until(lambda: spark_cluster.status()["completedapps"], 60, "app listed as completed")
    assert done[0]["id"] == result["app_id"]


def test_killed_executor_is_relaunched_and_app_finishes(
    spark_cluster: SparkCluster, submit_app, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    stop_file = tmp_path / "stop"
    app = submit_app(spark_cluster, LOOP_APP, [str(stop_file)], conf=WAIT_ALL_EXECUTORS)
    app_id = _app_id(app)
    before = wait_until(lambda: len(spark_cluster.executors(app_id)) == 2 and spark_cluster.executors(app_id),
                        EXECUTOR_TIMEOUT, "two executors")
    assert {e.worker_index for e in before} == {0, 1}

    victim = spark_cluster.kill_executor(before[0].pid)  # SIGKILL, by pid
    t_kill = time.monotonic()
    wait_until(lambda: not pid_alive(victim.pid), 30, "killed executor gone")
    old_ids = {e.executor_id for e in before}
    new = wait_until(lambda: [e for e in spark_cluster.executors(app_id) if e.executor_id not in old_ids],
                     EXECUTOR_TIMEOUT, "a relaunched executor")
    t_process = time.monotonic() - t_kill
    assert new[0].worker_index == victim.worker_index  # the only worker with a free core
    n_records = len(app.records())
    suffix = f"/{app_id}/{new[0].executor_id}"
    wait_until(lambda: any(c.endswith(suffix) for r in app.records()[n_records:] for c in r.get("cwds", [])),
               EXECUTOR_TIMEOUT, f"a task on the relaunched executor {new[0].executor_id}")
    t_task = time.monotonic() - t_kill
    print(f"[timing] SIGKILLed executor {victim.executor_id}: new executor {new[0].executor_id} process after "
          f"{t_process:.1f}s, its first task done after {t_task:.1f}s")

    stop_file.touch()
    assert app.wait(APP_TIMEOUT) == 0, app.tail()
    assert app.records()[-1].get("done", 0) > 0
    wait_until(lambda: not spark_cluster.executors(app_id), 60, "executors gone after the app")


def test_add_worker_grows_running_app_and_stop_leaves_nothing(
    spark_cluster: SparkCluster, submit_app, tmp_path: Path,  # type: ignore[no-untyped-def]
) -> None:
    app = submit_app(spark_cluster, LOOP_APP, [str(tmp_path / "never")])
    app_id = _app_id(app)
    wait_until(lambda: len(spark_cluster.executors(app_id)) == 2, EXECUTOR_TIMEOUT, "two executors")

    t0 = time.monotonic()
    added = spark_cluster.add_worker()
    t_worker = time.monotonic() - t0
    assert added.index == 2 and added.worker_id
    assert spark_cluster.alive_cores() == 3
    assert spark_cluster.capacity()["workers"] == 3
    # the master hands the free core to the running app (it wants all cores)
    wait_until(lambda: any(e.worker_index == 2 for e in spark_cluster.executors(app_id)),
               EXECUTOR_TIMEOUT, "an executor of the app on the new worker")
    t_executor = time.monotonic() - t0
    print(f"[timing] add_worker: ALIVE after {t_worker:.1f}s, app executor on it after {t_executor:.1f}s")

    executors = spark_cluster.executors(app_id)
    ours = spark_cluster.processes()
    started = [spark_cluster.master_pid, *(w.pid for w in spark_cluster.workers)]
    assert set(started) | {e.pid for e in executors} <= set(ours)
    python_workers = [p for p in ours if b"pyspark.daemon" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert python_workers, "the executors' Python workers (own process groups) are ours too"
    t0 = time.monotonic()
    spark_cluster.stop()
    print(f"[timing] stop: {time.monotonic() - t0:.1f}s for {len(ours)} processes")
    survivors = [p for p in ours if pid_alive(p)]
    assert survivors == [], f"still alive after stop(): {survivors}"
    assert spark_cluster.processes() == []
    spark_cluster.stop()  # a second stop is a no-op
    assert os.path.isdir(spark_cluster.workers[2].work_dir)
