"""Event-time timers fire exactly once across a batched migration and SIGKILLs of the driver: the
tumbling-window processor (examples/operators/window_counts.py) run by the CLI, killed inside a
worker before its cache commits (timers of that epoch had fired) and at a random time while an
8-step plan moves bins; after restarts, the deduplicated outputs equal the pure-Python reference
with every (user, window) exactly once, and no state of an emitted window is left."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dp_helpers import check_migration_property, checkpoints, plan_maps, produce, steps_from_maps
from spark_jobs import timers
from spark_jobs.bins import decode_entry
from spark_jobs.durable import read_state
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from tests.helpers.control import send_control
from tests.helpers.procs import killpg
from window_helpers import EXAMPLES, FLUSH_USER, as_tuple, events, flush_record, records, reference

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BINS = 32
OP = "window_counts:WindowCounts"


def test_window_timers_fire_exactly_once_across_migration_and_kills(kafka_bootstrap, make_topics, unique_name,
                                                                    tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    evs = events(8000, users=40, seed=11)
    keys, values = records(evs)
    produce(kafka_bootstrap, topic, keys, 4, values)
    expected = reference(evs)
    ensure_job_topics(kafka_bootstrap, job, 2)
    maps = plan_maps(BINS)
    steps = steps_from_maps(job, OP, "plan-win", BINS, maps)
    ckpt_dir, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", OP, "--input-topic", topic,
           "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", str(ckpt_dir), "--bootstrap", kafka_bootstrap,
           "--db-url", db_url, "--trigger-ms", "100", "--max-offsets-per-trigger", "800"]
    env = {**os.environ, "BALLAST_FAULTS_FILE": str(faults_file), "BALLAST_FAULTS_KILL_GROUP": "1",
           "BALLAST_SPARK_LOG_LEVEL": "ERROR",
           "PYTHONPATH": os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")])}
    spark_ckpt = ckpt_dir / "spark"
    rng = random.Random(29)
    next_step = 0
    flushed = False

    def control_tick() -> None:
        nonlocal next_step
        if next_step >= len(steps) or len(committed_epochs(spark_ckpt)) < 2:
            return
        if next_step == 0 or (steps[next_step - 1].plan_id, next_step) in checkpoints(db_url, job):
            send_control(kafka_bootstrap, job, [steps[next_step].to_json()], operator=OP)
            next_step += 1

    def consumed() -> int:
        eps = committed_epochs(spark_ckpt)
        end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
        return sum((end or {}).get(topic, {}).values())

    def outputs() -> list[tuple[str, int, int, int]]:
        return sorted(as_tuple(json.loads(o.value)) for o in read_output(kafka_bootstrap, f"{job}.output")[0])

    runs: list[str | None] = ["worker_before_commit 3", None]
    for i, fault in enumerate(runs):
        faults_file.write_text(f"{fault}\n" if fault else "")
        with open(logs / f"run{i}.log", "wb") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            deadline = time.time() + 360
            if fault is None:  # a random moment after the job has started
                while time.time() < deadline and proc.poll() is None and \
                        b"effective configuration" not in (logs / f"run{i}.log").read_bytes():
                    control_tick()
                    time.sleep(0.3)
                deadline = min(deadline, time.time() + rng.uniform(3, 8))
            while time.time() < deadline and proc.poll() is None:
                control_tick()
                time.sleep(0.3)
            killpg(proc)
        text = (logs / f"run{i}.log").read_text(errors="replace")
        if fault:
            assert "killing pid" in text and fault.split()[0] in text, f"run {i}: fault not hit:\n{text[-3000:]}"

    faults_file.write_text("")
    with open(logs / "final.log", "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + 600
            while time.time() < deadline:
                assert proc.poll() is None, (logs / "final.log").read_text()[-3000:]
                control_tick()
                if not flushed and consumed() == len(evs):
                    fk, fv = flush_record(evs)  # after the rest, so that it makes nothing late
                    produce(kafka_bootstrap, topic, fk, 1, fv)
                    flushed = True
                if flushed and next_step == len(steps) and len(checkpoints(db_url, job)) == len(steps) \
                        and len(outputs()) >= len(expected):
                    break
                time.sleep(0.5)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                killpg(proc)
    assert rc == 0, (logs / "final.log").read_text(errors="replace")[-3000:]

    cps = checkpoints(db_url, job)
    assert sorted(cps) == [("plan-win", s.step) for s in steps]
    assert all(c.status == "applied" for c in cps.values())
    check_migration_property(db_url, job)
    got = outputs()
    assert len(set(got)) == len(got), "a (user, window) emitted twice: a timer fired more than once"
    assert got == expected, f"{len(set(got) - set(expected))} unexpected, {len(set(expected) - set(got))} missing"
    # all that is left in the durable state: the flush event's open window and its timer
    left = set()
    for kv in read_state(str(ckpt_dir / "state")).values():
        for sk, v in kv.items():
            key = v if timers.is_index_key(sk) else decode_entry(sk, v)[0]
            left.add(json.loads(key)["user"])
    assert left == {FLUSH_USER}
    print(f"windows={len(got)} epochs={len(committed_epochs(spark_ckpt))}")
