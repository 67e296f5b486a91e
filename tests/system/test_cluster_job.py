"""The key-count job on a real Spark standalone cluster on loopback, under adverse scheduling.

Master + 3 workers (1 core each, own work and local dirs), the job submitted in client mode with
its code shipped as an archive (--py-files) and a user operator module the same way;
`spark.locality.wait=0`, speculation on (Spark starts no copy on the host of a running attempt, and
every executor here is on 127.0.0.1: tests/system/test_zombie_executor.py covers a late attempt),
`spark.task.maxFailures=4`. While a batched plan runs
(some steps with pre-copy; W 2 -> 3 -> 2, which adds an executor and gives one back), executors are
SIGKILLed at least 3 times (mid-epoch and right after a step, i.e. mid-move) and the driver 3 times.
Oracle: every key's count, every output (deduplicated by id; read_committed: without
deduplication) and every checkpoint exactly as a pure-Python run without any of that; keys of 1
byte to 100 kB; a record whose fold raises lands in `<job>.dlq`; the driver never opened a state
cache.

The durable state lives on a real S3-compatible server (s3s-fs, `s3_server`), which is SIGKILLed
and restarted 30 s later, in the middle of the plan: the job waits (no driver exits, no epoch is lost) and resumes. The
test prints the server's requests per committed epoch (docs/operations.md, "State on an object
store").
"""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from migrations_db import models as m
from migrations_db.db import session_scope
from scripts.spark_cluster import spark_submit_cmd, start_cluster, submit_env
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import parse_id, read_output, record_id, scan_topic
from spark_jobs.runner import ensure_job_topics
from spark_jobs.ship import job_archive
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import (
    check_migration_property,
    check_state,
    checkpoints,
    outputs_as_set,
    plan_maps,
    produce,
    reference_by_epoch,
    steps_from_maps,
    zipf_keys,
)
from tests.helpers.procs import killpg

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BINS = 32
N_RECORDS = 40_000
N_KEYS = 8_000
ODD_KEYS = [b"x", b"y" * 600, b"z" * 10_000, b"w" * 100_000]
POISON_KEY = b"poison-key"


def test_keycount_on_a_cluster_survives_executor_and_driver_loss(kafka_bootstrap, make_topics, unique_name,
                                                                  tmp_path, db_url, s3_server):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    keys = zipf_keys(N_RECORDS, N_KEYS, seed=29)
    values = [b"1"] * len(keys)
    for i, k in enumerate(ODD_KEYS * 5):  # keys of 1 B .. 100 kB, spread through the input
        keys.insert(1000 + i * 1500, k)
        values.insert(1000 + i * 1500, b"1")
    keys.insert(20_000, POISON_KEY)
    values.insert(20_000, b"poison")
    produce(kafka_bootstrap, topic, keys, 4, values)
    ensure_job_topics(kafka_bootstrap, job, 2)
    steps = steps_from_maps(job, "poison_operator:PoisonCount", "plan-cluster", BINS, plan_maps(BINS))
    steps = [dataclasses.replace(s, precopy=(i % 2 == 1)) for i, s in enumerate(steps)]
    ckpt = tmp_path / "ckpt"
    spark_ckpt = ckpt / "spark"
    logs = tmp_path / "logs"
    logs.mkdir()
    state_uri = f"s3://ballast/{job}/durable"  # the executors inherit the AWS_* variables from the workers
    cluster = start_cluster(tmp_path / "cluster", workers=3, cores_per_worker=1, memory_per_worker="1g",
                            start_timeout=120)
    try:
        cmd = spark_submit_cmd(
            cluster, str(REPO / "spark_jobs" / "main.py"),
            ["run", "--job", job, "--operator", "poison_operator:PoisonCount", "--input-topic", topic,
             # URIs, not paths: the driver reaches its checkpoint and the state through pyarrow.fs
             "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", f"file://{ckpt}",
             "--state-uri", state_uri, "--bootstrap", kafka_bootstrap,
             "--db-url", db_url, "--trigger-ms", "300", "--max-offsets-per-trigger", "1500",
             "--snapshot-every", "4", "--master-ui", cluster.ui_url],
            py_files=[str(job_archive(tmp_path / "dist")), str(Path(__file__).with_name("poison_operator.py"))],
            conf={"spark.locality.wait": "0", "spark.speculation": "true", "spark.task.maxFailures": "4",
                  "spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.sql.shuffle.partitions": "4",
                  "spark.ui.enabled": "false"},
            name=f"ballast-{job}")
        env = {**submit_env(), "BALLAST_SPARK_LOG_LEVEL": "ERROR"}
        rng = random.Random(31)
        next_step = 0
        exec_kills: list[str] = []

        def control_tick() -> bool:
            """Flow control: the next step once the previous one is checkpointed. True when one was sent."""
            nonlocal next_step
            if next_step >= len(steps) or len(committed_epochs(spark_ckpt)) < 3:
                return False
            if next_step == 0 or (steps[next_step - 1].plan_id, next_step) in checkpoints(db_url, job):
                send_control(kafka_bootstrap, job, [steps[next_step].to_json()], operator=steps[0].operator)
                next_step += 1
                return True
            return False

        def kill_an_executor(why: str) -> None:
            ex = cluster.executors()
            if ex:
                victim = rng.choice(ex)
                cluster.kill_executor(victim.pid)
                exec_kills.append(f"{why}: executor {victim.executor_id} on worker {victim.worker_index}")

        def done() -> bool:
            eps = committed_epochs(spark_ckpt)
            end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
            return (bool(end) and sum(end.get(topic, {}).values()) == len(keys) and next_step == len(steps)
                    and len(checkpoints(db_url, job)) == len(steps))

        def launch(i: int) -> tuple[subprocess.Popen, Path]:
            log = logs / f"driver{i}.log"
            with open(log, "wb") as f:
                proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=f, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
            deadline = time.time() + 240
            while b"effective configuration" not in log.read_bytes():
                assert proc.poll() is None and time.time() < deadline, log.read_text(errors="replace")[-4000:]
                time.sleep(0.5)
            return proc, log

        # three driver runs, each killed a few epochs after its start; in each, an executor is
        # killed right after a step was sent (a move in progress) or mid-epoch
        for i in range(3):
            proc, log = launch(i)
            target = len(committed_epochs(spark_ckpt)) + rng.randint(4, 7)
            deadline = time.time() + 400
            killed_mid_move = False
            while len(committed_epochs(spark_ckpt)) < target:
                assert time.time() < deadline, f"run {i} made no progress:\n" + log.read_text(errors="replace")[-4000:]
                assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
                if control_tick() and not killed_mid_move:
                    time.sleep(rng.uniform(0.3, 1.5))
                    kill_an_executor(f"run {i}, after step {next_step}")
                    killed_mid_move = True
                time.sleep(0.3)
            if not killed_mid_move:
                kill_an_executor(f"run {i}, mid-epoch")
            time.sleep(rng.uniform(0.5, 3))
            killpg(proc)
        # the last run goes to the end, with one more executor loss, then stops gracefully
        proc, log = launch(3)

        def warned() -> bool:
            """The driver or an executor logged a retry against the unreachable object store."""
            return "object store unreachable" in log.read_text(errors="replace") or any(
                "object store unreachable" in p.read_text(errors="replace") for p in cluster.base_dir.rglob("stderr"))

        try:
            deadline = time.time() + 900
            killed = False
            outage_at: int | None = None  # the committed epoch count when the S3 server came back
            while time.time() < deadline and not done():
                assert proc.poll() is None, log.read_text(errors="replace")[-4000:]
                control_tick()
                if not killed and len(committed_epochs(spark_ckpt)) > 5:
                    kill_an_executor("final run, mid-epoch")
                    killed = True
                if outage_at is None and killed and 0 < next_step < len(steps):
                    # mid-plan: the state's server goes away for 30 s; the job waits, nothing exits
                    before = len(committed_epochs(spark_ckpt))
                    s3_server.kill()
                    stopped = time.time()
                    # 30 s at least, and until the job has met the outage (a retry warning): on a loaded
                    # machine a slow epoch can span the 30 s without touching the state
                    while time.time() - stopped < 30 or (not warned() and time.time() - stopped < 150):
                        assert proc.poll() is None, "the driver exited during the outage:\n" + \
                            log.read_text(errors="replace")[-4000:]
                        time.sleep(1)
                    s3_server.up()
                    outage_at = len(committed_epochs(spark_ckpt))
                    assert outage_at <= before + 1, "epochs committed while their state could not be written"
                time.sleep(0.5)
            assert outage_at is not None, "the plan ended before the S3 outage could be staged"
            assert done(), f"job did not finish input and plan; steps sent {next_step}:\n" + \
                log.read_text(errors="replace")[-4000:]
            subprocess.run([sys.executable, "-m", "spark_jobs.cli", "stop", "--checkpoint-dir", f"file://{ckpt}"],
                           check=True, cwd=REPO)
            rc = proc.wait(timeout=180)
        finally:
            if proc.poll() is None:
                killpg(proc)
        text = log.read_text(errors="replace")
        assert rc == 0, text[-4000:]
        assert len(exec_kills) >= 3, exec_kills

        cps = checkpoints(db_url, job)
        assert sorted(cps) == [("plan-cluster", s.step) for s in steps]
        assert all(c.status == "applied" for c in cps.values()), {k: (c.status, c.reason) for k, c in cps.items()}
        with session_scope(db_url) as s:
            applies = list(s.scalars(select(m.StepDecision).where(m.StepDecision.job == job,
                                                                  m.StepDecision.action == "apply")))
            hb = s.get(m.Heartbeat, (job, steps[0].operator))
            dead = sum(r.dead_letters for r in s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job)))
        assert sorted((d.plan_id, d.step) for d in applies) == sorted(cps), "each step applied exactly once"
        assert hb.capacity == 3, "the job reports the cluster's capacity (3 worker cores)"
        assert dead == 1
        check_migration_property(db_url, job)

        epochs = committed_epochs(spark_ckpt)
        ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, spark_ckpt, epochs)
        del ref_counts[POISON_KEY]
        ref_outputs = {o for o in ref_outputs if o[1] != POISON_KEY}
        outs, dups = read_output(kafka_bootstrap, f"{job}.output")
        got = outputs_as_set(outs)
        assert len(got) == len(outs), "one value per output id"
        assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
        check_state(state_uri, 2, plan_maps(BINS)[-1][1], BINS, ref_counts)
        assert "object store unreachable" in text or any(
            "object store unreachable" in p.read_text(errors="replace") for p in cluster.base_dir.rglob("stderr")), \
            "the outage was waited out (a warning per retry), not failed"
        dlq, _ = read_output(kafka_bootstrap, f"{job}.dlq")
        assert [(d.key, d.value) for d in dlq] == [(POISON_KEY, b"poison")]
        # transactional output (the default): a plain read_committed consumer, no deduplication,
        # sees each output and the dead letter once despite executor kills, retries and speculation
        committed = Counter((parse_id(record_id(msg))[0], msg.key, int(msg.value)) for msg in scan_topic(
            kafka_bootstrap, f"{job}.output", 120.0, isolation_level="read_committed", consumer_timeout_ms=1000))
        assert max(committed.values()) == 1 and set(committed) == ref_outputs, "read_committed: not exactly once"
        assert [(d.key, d.value) for d in scan_topic(kafka_bootstrap, f"{job}.dlq", 60.0,
                                                     isolation_level="read_committed")] == [(POISON_KEY, b"poison")]
        # caches live on the executors (their own work dirs), never with the driver
        caches = {p.relative_to(cluster.base_dir).parts[0] for p in cluster.base_dir.rglob("ballast-cache")}
        assert len(caches) >= 2, caches
        assert not list(ckpt.rglob("ballast-cache")) and not list(tmp_path.glob("ballast-cache"))
        requests = s3_server.request_counts()
        per_epoch = {op: round(n / len(epochs), 1) for op, n in sorted(requests.items())}
        print(f"epochs={len(epochs)} outputs={len(outs)} duplicates dropped={dups} executor kills={exec_kills}")
        print(f"S3 requests per committed epoch (all runs, kills and retries included): {per_epoch}")
    finally:
        cluster.stop()
