"""Run a job's CLI command under crash injection, then to completion: what the processor and join
exactly-once tests share (a fault-point kill, a kill at a random moment, a final clean run)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spark_jobs import timers
from spark_jobs.bins import decode_entry
from spark_jobs.durable import read_state
from spark_jobs.offsets import committed_epochs
from spark_jobs.runner import QUERY_STARTED
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import check_migration_property, checkpoints
from tests.helpers.procs import killpg

REPO = Path(__file__).resolve().parents[2]


def killed_runs(cmd: list[str], env: dict[str, str], logs: Path, faults_file: Path, tick: Callable[[], None],
                rng: random.Random, faults: tuple[str | None, ...] = ("worker_before_commit 3", None)) -> None:
    """One run per fault: a `<point> <n>` line kills the job there; None kills its process group
    at a random moment 3-8 s after it started. `tick` runs every 0.3 s (e.g. sends control steps)."""
    for i, fault in enumerate(faults):
        faults_file.write_text(f"{fault}\n" if fault else "")
        with open(logs / f"run{i}.log", "wb") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            deadline = time.time() + 360
            if fault is None:  # a random moment after the job has started
                while time.time() < deadline and proc.poll() is None and \
                        b"effective configuration" not in (logs / f"run{i}.log").read_bytes():
                    tick()
                    time.sleep(0.3)
                deadline = min(deadline, time.time() + rng.uniform(3, 8))
            while time.time() < deadline and proc.poll() is None:
                tick()
                time.sleep(0.3)
            killpg(proc)
        text = (logs / f"run{i}.log").read_text(errors="replace")
        if fault:
            assert "killing pid" in text and fault.split()[0] in text, f"run {i}: fault not hit:\n{text[-3000:]}"
    faults_file.write_text("")


def wait_started(proc: subprocess.Popen[bytes], log_path: Path, deadline: float) -> None:
    """Until the job logs that its streaming query runs: before that its SIGTERM handler may not be
    in place (a job whose killed runs had already done all the work got a SIGTERM at once, exit -15)."""
    while QUERY_STARTED.encode() not in log_path.read_bytes():
        assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
        assert time.time() < deadline, "the job never started its query:\n" + \
            log_path.read_text(errors="replace")[-3000:]
        time.sleep(0.3)


def final_run(cmd: list[str], env: dict[str, str], log_path: Path, done: Callable[[], bool],
              timeout_s: float = 600, linger_s: float = 0.0) -> None:
    """Run until `done()` (polled every 0.5 s, once the query runs), `linger_s` more, then SIGTERM;
    exit code 0 required."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.time() + timeout_s
            wait_started(proc, log_path, deadline)
            while time.time() < deadline:
                assert proc.poll() is None, log_path.read_text(errors="replace")[-3000:]
                if done():
                    break
                time.sleep(0.5)
            time.sleep(linger_s)
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                killpg(proc)
    assert rc == 0, log_path.read_text(errors="replace")[-3000:]


def cli_env(faults_file: Path, *paths: Path) -> dict[str, str]:
    """The job's environment: crash injection on (whole process group), `paths` on PYTHONPATH."""
    return {**os.environ, "BALLAST_FAULTS_FILE": str(faults_file), "BALLAST_FAULTS_KILL_GROUP": "1",
            "BALLAST_SPARK_LOG_LEVEL": "ERROR",
            "PYTHONPATH": os.pathsep.join([*(str(p) for p in paths), os.environ.get("PYTHONPATH", "")])}


class StepSender:
    """Sends a plan's steps as the flow-control emitter does — each after the previous one's
    checkpoint — once the job has committed two epochs; call it often (it is the runs' `tick`)."""

    def __init__(self, bootstrap: str, job: str, operator: str, steps: list[Any], spark_ckpt: Path,
                 db_url: str) -> None:
        self.bootstrap, self.job, self.operator, self.steps = bootstrap, job, operator, steps
        self.spark_ckpt, self.db_url = spark_ckpt, db_url
        self.sent = 0

    def __call__(self) -> None:
        if self.sent >= len(self.steps) or len(committed_epochs(self.spark_ckpt)) < 2:
            return
        if self.sent == 0 or (self.steps[self.sent - 1].plan_id, self.sent) in self._checkpoints():
            send_control(self.bootstrap, self.job, [self.steps[self.sent].to_json()], operator=self.operator)
            self.sent += 1

    def _checkpoints(self) -> dict[tuple[str, int], Any]:
        return checkpoints(self.db_url, self.job, self.operator)

    @property
    def all_applied(self) -> bool:
        return self.sent == len(self.steps) and len(self._checkpoints()) == len(self.steps)


def check_plan_applied(db_url: str, job: str, plan_id: str, steps: list[Any], operator: str | None = None) -> None:
    """Every step of the plan has its one checkpoint, applied, and the migration property held
    (for `operator`'s checkpoints, maps and bins only when given: each operator of a chain has its own)."""
    cps = checkpoints(db_url, job, operator)
    assert sorted(cps) == [(plan_id, s.step) for s in steps]
    assert all(c.status == "applied" for c in cps.values())
    check_migration_property(db_url, job, operator)


def keys_with_state(state_uri: str, column: str) -> set[Any]:
    """The grouping column `column` of every key a processor job still holds state or timers for."""
    left = set()
    for kv in read_state(state_uri).values():
        for sk, v in kv.items():
            key = v if timers.is_index_key(sk) else decode_entry(sk, v)[0]
            left.add(json.loads(key)[column])
    return left
