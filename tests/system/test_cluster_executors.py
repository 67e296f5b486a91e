"""Executors follow W on the loopback standalone cluster: W 1 -> 3 -> 1 under load.

Master + 3 workers (1 core each), the key-count job submitted in client mode with 1-core executors.
Records keep arriving while two steps run (W 1 -> 3, then 3 -> 1). After the job starts and after
each step: the heartbeat's executors (metrics DB), the cores the master granted the app, the
executors the workers run for it (their JSON APIs) and the app's executor JVMs all come to
ceil(W / cores per executor), and the latest routing map has W workers. The epoch that gives two
executors back also loses the one it keeps (SIGKILL as soon as the driver logs the release): the
cluster must replace it, which it did not when the release left the app's executor limit at 0.
Oracle: each step applied once, every output (deduplicated by id) and the durable state exactly as
a pure-Python run.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from sqlalchemy import select

from migrations_db import models as m
from migrations_db.db import session_scope
from scripts.spark_cluster import SparkCluster, spark_submit_cmd, start_cluster
from spark_jobs.bins import uniform_assignment
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from spark_jobs.ship import job_archive
from tests.helpers.cluster import JobDriver
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import (
    check_migration_property,
    check_state,
    checkpoints,
    outputs_as_set,
    reference_by_epoch,
    steps_from_maps,
    zipf_keys,
)
from tests.helpers.procs import killpg
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BINS = 16
CORES_PER_EXECUTOR = 1
PARTITIONS = 2
RELEASED = "ballast.executors: workers"  # the driver's line when W changes its executors


class Load:
    """Records at ~400/s from a thread until stopped; `sent` is how many were acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.keys = zipf_keys(200_000, 2_000, seed=41)
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks="all")
        self.topic, self.sent = topic, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent + 100 <= len(self.keys):
            for i in range(self.sent, self.sent + 100):
                self.producer.send(self.topic, key=self.keys[i], value=b"1", partition=i % PARTITIONS)
            self.producer.flush(timeout=60)
            self.sent += 100
            time.sleep(0.25)

    def stop(self) -> int:
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=90)
            self.producer.close()
        return self.sent


def _nth_line(log: Path, marker: str, n: int) -> str | None:
    """The (n+1)-th line of `log` with `marker`, or None before it is written."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if marker in ln]
    return lines[n] if len(lines) > n else None


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url.rstrip("/") + "/json/", timeout=3) as r:
        return json.load(r)


def cluster_view(cluster: SparkCluster, app_name: str) -> tuple[int, int, int]:
    """(executors by the cores the master granted the app, executors the workers run for it, executor JVMs)."""
    st = cluster.status()
    apps = [a for a in st.get("activeapps", []) if a.get("name") == app_name]
    if len(apps) != 1:
        return -1, -1, -1
    app_id = str(apps[0]["id"])
    try:
        on_workers = sum(1 for w in st["workers"] if w["state"] == "ALIVE"
                         for e in _get_json(w["webuiaddress"]).get("executors", []) if e.get("appid") == app_id)
    except (OSError, ValueError):
        return -1, -1, -1
    return int(apps[0]["cores"]) // CORES_PER_EXECUTOR, on_workers, len(cluster.executors(app_id))


def test_executors_follow_w_up_and_down_on_a_cluster(kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: PARTITIONS})
    ensure_job_topics(kafka_bootstrap, job, 2)
    maps = [(3, uniform_assignment(BINS, 3)), (1, uniform_assignment(BINS, 1))]
    steps = steps_from_maps(job, "keycount", "plan-exec", BINS, maps, start_workers=1)
    ckpt = tmp_path / "ckpt"
    spark_ckpt = ckpt / "spark"
    app_name = f"ballast-{job}"
    cluster = start_cluster(tmp_path / "cluster", workers=3, cores_per_worker=1, memory_per_worker="1g",
                            start_timeout=120)
    load: Load | None = None
    proc: subprocess.Popen | None = None
    try:
        cmd = spark_submit_cmd(
            cluster, str(REPO / "spark_jobs" / "main.py"),
            ["run", "--job", job, "--input-topic", topic, "--bins", str(BINS), "--workers", "1",
             "--checkpoint-dir", f"file://{ckpt}", "--state-uri", f"file://{ckpt}/durable",
             "--bootstrap", kafka_bootstrap, "--db-url", db_url, "--trigger-ms", "500",
             "--max-offsets-per-trigger", "1000", "--master-ui", cluster.ui_url],
            py_files=[str(job_archive(tmp_path / "dist"))],
            conf={"spark.locality.wait": "0", "spark.executor.cores": str(CORES_PER_EXECUTOR),
                  "spark.task.maxFailures": "4", "spark.executor.memory": "512m",
                  "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
            name=app_name)
        driver = JobDriver.start(cmd, tmp_path)
        proc, log, alive = driver.proc, driver.log, driver.alive
        load = Load(kafka_bootstrap, topic)

        def heartbeat() -> m.Heartbeat | None:
            with session_scope(db_url) as s:
                return s.get(m.Heartbeat, (job, "keycount"))

        def settled(w: int) -> tuple[int, int, int, int] | None:
            """The four executor counts once all equal ceil(W / cores) (None before)."""
            want = math.ceil(w / CORES_PER_EXECUTOR)
            hb = heartbeat()
            counts = (hb.executors if hb and hb.executors is not None else -1, *cluster_view(cluster, app_name))
            last["counts"] = counts  # a timed-out wait says where it stood
            return counts if all(c == want for c in counts) else None

        measured: dict[str, Any] = {}
        last: dict[str, Any] = {}
        t0 = time.monotonic()
        # the app first takes every free core (3 executors); W = 1 gives two back
        wait_until(lambda: len(committed_epochs(spark_ckpt)) >= 3, 240, "3 committed epochs", check=alive)
        measured["W=1 (start)"] = wait_until(lambda: settled(1), 120, "executors at W = 1 after the start",
                                             poll=1, check=alive)
        for step in steps:
            t_step = time.monotonic()
            released_before = log.read_text(errors="replace").count(RELEASED)
            send_control(kafka_bootstrap, job, [step.to_json()])
            if step.workers < maps[0][0]:  # the step down
                # the epoch that gives executors back loses the one it keeps: the cluster must replace it
                line = wait_until(lambda: _nth_line(log, RELEASED, released_before), 120,
                                  "the driver giving executors back", poll=0.1, check=alive)
                released = set(re.findall(r"'(\d+)'", line.split(RELEASED, 1)[1]))
                kept = [e for e in cluster.executors() if e.executor_id not in released]
                assert len(kept) == 1, (line, kept)
                cluster.kill_executor(kept[0].pid)
                measured["killed"] = f"executor {kept[0].executor_id}, kept by {line.split(' INFO ')[0]}"
            wait_until(lambda: (step.plan_id, step.step) in checkpoints(db_url, job), 120,
                       f"checkpoint of step {step.step}", poll=0.5, check=alive)
            try:
                counts = wait_until(lambda: settled(step.workers), 120, f"executors at W = {step.workers}",
                                    poll=1, check=alive)
            except AssertionError as exc:  # say where it stood
                raise AssertionError(f"{exc}: (heartbeat, master's cores, workers' executors, executor JVMs) were "
                                     f"{last.get('counts')}; measured before: {measured}") from None
            measured[f"W={step.workers} (step {step.step})"] = (*counts, round(time.monotonic() - t_step, 1))
            with session_scope(db_url) as s:
                latest = s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)
                                   .order_by(m.RoutingMap.map_version.desc())).first()
            assert latest is not None and latest.map_version == step.step
            assert latest.workers == step.workers and latest.assignment == maps[step.step - 1][1], "bins follow W"
            assert heartbeat().workers == step.workers

        total = load.stop()

        def consumed_all() -> bool:
            eps = committed_epochs(spark_ckpt)
            end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
            return bool(end) and sum(end.get(topic, {}).values()) == total

        wait_until(consumed_all, 300, "all input consumed", poll=1, check=alive)
        subprocess.run([sys.executable, "-m", "spark_jobs.cli", "stop", "--checkpoint-dir", f"file://{ckpt}"],
                       check=True, cwd=REPO)
        rc = proc.wait(timeout=180)
        assert rc == 0, log.read_text(errors="replace")[-4000:]
        elapsed = time.monotonic() - t0
    finally:
        if load is not None:
            load.stop()
        if proc is not None and proc.poll() is None:
            killpg(proc)
        cluster.stop()

    # 0 lost, 0 doubled: each step applied once, outputs and state as a pure-Python run
    cps = checkpoints(db_url, job)
    assert sorted(cps) == [("plan-exec", 1), ("plan-exec", 2)]
    assert all(c.status == "applied" for c in cps.values()), {k: (c.status, c.reason) for k, c in cps.items()}
    check_migration_property(db_url, job)
    epochs = committed_epochs(spark_ckpt)
    ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, spark_ckpt, epochs)
    assert sum(ref_counts.values()) == total
    outs, dups = read_output(kafka_bootstrap, f"{job}.output")
    got = outputs_as_set(outs)
    assert len(got) == len(outs), "one value per output id"
    assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
    check_state(f"file://{ckpt}/durable", 1, maps[-1][1], BINS, ref_counts)
    print(f"records={total} epochs={len(epochs)} run={elapsed:.0f}s duplicates dropped={dups} "
          f"(heartbeat, master, workers, JVMs[, s after the step]): {measured}")
