"""Exactly once across SIGKILLs: the CLI job is killed 6 times (mid-move, inside the DB commit of a
step's epoch, between that commit and its acks, inside a Spark worker before its store commits,
before the manifest, at a random time after start) while a plan applies; after restarts from its
checkpoint, state and deduplicated outputs equal the reference (also read by a consumer that
remembers only the last three epochs' ids) and every step has exactly one applied checkpoint. After
every kill, each ack on the acks topic finds its epoch committed; every restart passes `--workers 5`,
which the logged map overrides (with a warning). The job runs with `--output-mode at-least-once`:
this is the test of the id rule (Spark's Kafka sink; replays re-emit, readers deduplicate);
transactional output, the default, is tests/system/test_txn_exactly_once.py."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from ballast.protocol import acks_topic
from ballast.store import JobStore
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import (
    check_acks_follow_commits,
    check_migration_property,
    check_state,
    checkpoints,
    outputs_as_set,
    plan_maps,
    read_json_topic,
    read_output_bounded,
    reference_by_epoch,
    steps_from_maps,
    zipf_keys,
)
from tests.helpers.kill_runs import wait_started
from tests.helpers.procs import killpg

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BINS = 32
N_RECORDS = 60_000
N_KEYS = 15_000


def test_sigkill_anywhere_then_restart_is_exactly_once(kafka_bootstrap, make_topics, unique_name, tmp_path, db_url,
                                                       produce_with_spark):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    keys = zipf_keys(N_RECORDS, N_KEYS, seed=17)
    produce_with_spark(topic, keys)
    ensure_job_topics(kafka_bootstrap, job, 2)  # what a controller does before its first step
    maps = plan_maps(BINS)
    steps = steps_from_maps(job, "keycount", "plan-crash", BINS, maps)
    ckpt_dir = tmp_path / "ckpt"
    faults_file = tmp_path / "faults"
    logs = tmp_path / "logs"
    logs.mkdir()
    first = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", "keycount",
             "--input-topic", topic, "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", str(ckpt_dir),
             "--bootstrap", kafka_bootstrap, "--db-url", db_url, "--trigger-ms", "100",
             "--max-offsets-per-trigger", "4000", "--output-mode", "at-least-once"]
    # every restart asks for W = 5: `--workers` counts at the first start only, the logged map wins
    cmd = [("5" if a == "2" and first[i - 1] == "--workers" else a) for i, a in enumerate(first)]
    assert cmd.count("5") == 1
    env = {**os.environ, "BALLAST_FAULTS_FILE": str(faults_file), "BALLAST_FAULTS_KILL_GROUP": "1",
           "BALLAST_SPARK_LOG_LEVEL": "ERROR"}
    spark_ckpt = ckpt_dir / "spark"
    rng = random.Random(23)
    next_step = 0

    def control_tick() -> None:
        """Controller with flow control: the next step once the previous one is checkpointed."""
        nonlocal next_step
        if next_step >= len(steps):
            return
        if next_step == 0 and len(committed_epochs(spark_ckpt)) < 2:
            return  # let state build up first, so the first move has keys to carry
        if next_step == 0 or (steps[next_step - 1].plan_id, next_step) in checkpoints(db_url, job):
            send_control(kafka_bootstrap, job, [steps[next_step].to_json()])
            next_step += 1

    def done() -> bool:
        eps = committed_epochs(spark_ckpt)
        end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
        cps = checkpoints(db_url, job)
        return (bool(end) and sum(end.get(topic, {}).values()) == N_RECORDS
                and len(cps) == len(steps) and next_step == len(steps))

    # each run: a fault to hit (or a random-time kill), then restart from the checkpoint
    # (after a crash inside one worker, the other workers' stores have committed the epoch: the replay
    # re-emits their outboxes; a random kill lands anywhere, often after the apply or mid-epoch).
    # The first kill is in step 1's epoch; the next restart replays that epoch first and is killed
    # inside its DB commit (acks not sent), the one after between that commit and the acks.
    # generous limits: a fault run ends as soon as the job kills itself; they only matter on a loaded box
    runs: list[tuple[str | None, float]] = [("worker_mid_move 1", 360), ("in_step_commit 1", 360),
                                          ("before_acks 1", 360), ("worker_before_commit 2", 360),
                                          ("before_manifest 3", 360), (None, 360)]
    kills = 0
    for i, (fault, limit) in enumerate(runs):
        faults_file.write_text(f"{fault}\n" if fault else "")
        with open(logs / f"run{i}.log", "wb") as log:
            proc = subprocess.Popen(cmd if i else first, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            deadline = time.time() + limit
            if fault is None:  # random kill: a random moment after the job has started
                while time.time() < deadline and proc.poll() is None and b"effective configuration" not in \
                        (logs / f"run{i}.log").read_bytes():
                    control_tick()
                    time.sleep(0.3)
                deadline = min(deadline, time.time() + rng.uniform(2, 8))
            while time.time() < deadline and proc.poll() is None:
                control_tick()
                time.sleep(0.3)
            if proc.poll() is None:
                killpg(proc)  # a random-time kill (or a fault that was not reached in time)
            else:
                killpg(proc)  # the job's group (JVM, Python workers) is gone with it; reap
            kills += 1
        text = (logs / f"run{i}.log").read_text(errors="replace")
        if fault:
            assert "killing pid" in text and fault.split()[0] in text, (
                f"run {i}: fault {fault} not hit:\n{text[-3000:]}")
        if i:
            assert "--workers 5 is ignored" in text, f"run {i}: no warning that the logged map wins:\n{text[-3000:]}"
        # whatever the kill left: an ack a controller can see finds its epoch committed (ack after commit)
        check_acks_follow_commits(kafka_bootstrap, db_url, job)
        if fault and fault.startswith("before_acks"):  # the kill left step 1 committed and not acked
            acked = {(a["plan_id"], a["step"]) for a in read_json_topic(kafka_bootstrap, acks_topic(job))}
            assert ("plan-crash", 1) in checkpoints(db_url, job) and ("plan-crash", 1) not in acked
    assert kills >= 6

    # the last run goes to the end, then stops gracefully on SIGTERM
    faults_file.write_text("")
    with open(logs / "final.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + 600
            wait_started(proc, logs / "final.log", deadline)
            while time.time() < deadline and not done():
                assert proc.poll() is None, (logs / "final.log").read_text()[-3000:]
                control_tick()
                time.sleep(0.5)
            assert done(), "job did not finish input and plan after the crashes"
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                killpg(proc)
    final_log = (logs / "final.log").read_text(errors="replace")
    assert rc == 0, final_log[-3000:]
    assert "ballast job starting with effective configuration" in final_log and "stopped after epoch" in final_log

    cps = checkpoints(db_url, job)
    assert sorted(cps) == [("plan-crash", s.step) for s in steps]
    assert all(c.status == "applied" for c in cps.values()), {k: (c.status, c.reason) for k, c in cps.items()}
    assert [cps[("plan-crash", s.step)].map_version_after for s in steps] == list(range(1, len(steps) + 1))
    with session_scope(db_url) as s:
        applies = list(s.scalars(select(m.StepDecision).where(m.StepDecision.job == job,
                                                              m.StepDecision.action == "apply")))
    hb = JobStore(db_url, job, "keycount").heartbeat()
    assert sorted((d.plan_id, d.step) for d in applies) == sorted(cps), "each step decided 'apply' exactly once"
    assert hb is not None and hb.status == "stopped"
    check_migration_property(db_url, job)
    # restarted with --workers 5 every time: the job kept the logged map (the plan's W 2 -> 3 -> 2)
    assert "--workers 5 is ignored" in final_log
    with session_scope(db_url) as s:
        map_ws = [r.workers for r in s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)
                                                .order_by(m.RoutingMap.map_version))]
        epoch_ws = set(s.scalars(select(m.EpochMetrics.workers).where(m.EpochMetrics.job == job)))
    assert hb.workers == 2 and map_ws[-1] == 2 and 5 not in map_ws and epoch_ws == {2, 3}, (hb, map_ws, epoch_ws)
    # every step's ack was sent (the one killed before its acks too, by the replay) after its commit
    assert check_acks_follow_commits(kafka_bootstrap, db_url, job) >= len(steps)
    acked = {(a["plan_id"], a["step"]) for a in read_json_topic(kafka_bootstrap, acks_topic(job))
             if a["status"] == "applied"}
    assert acked == set(cps)

    epochs = committed_epochs(spark_ckpt)
    ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, spark_ckpt, epochs)
    outs, dups = read_output(kafka_bootstrap, f"{job}.output")
    got = outputs_as_set(outs)
    assert len(got) == len(outs)
    assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
    # the replays re-emitted outputs (before_manifest: every task had written its epoch), and a consumer
    # that remembers only the ids of the last three epochs (per partition) drops every duplicate
    assert dups > 0
    assert read_output_bounded(kafka_bootstrap, f"{job}.output", keep_epochs=3) == outs
    check_state(str(ckpt_dir / "state"), 3, maps[-1][1], BINS, ref_counts)
    print(f"kills={kills} epochs={len(epochs)} outputs={len(outs)} replayed duplicates dropped={dups}")
