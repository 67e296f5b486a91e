"""One driver at a time: a loaded key-count job's driver is paused (SIGSTOP of its whole process
group, mid-epoch) past the heartbeat timeout; a real supervisor pass relaunches the job on the
same checkpoint and state, which takes a newer driver token; the newer driver goes on (its
retention removes the epochs the paused one was working on); then the old driver is resumed
(SIGCONT). It must commit nothing, exit with the fencing message and exit code 3, leave the
newer driver's heartbeat alone, and the outputs (deduplicated by their `ballast-id`) and the
state must show 0 lost and 0 doubled."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from ballast import store, supervisor
from ballast.config import load_jobs
from spark_jobs.bins import uniform_assignment
from spark_jobs.fencing import FENCED_EXIT
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from tests.helpers.dp_helpers import check_state, outputs_as_set, produce, reference_by_epoch, zipf_keys
from tests.helpers.jobs import write_jobs_file
from tests.helpers.procs import killpg
from tests.helpers.wait import wait_until
from tests.helpers.xdist_groups import OUTAGES

pytestmark = [pytest.mark.dataplane, pytest.mark.slow, OUTAGES]

REPO = Path(__file__).resolve().parents[2]
BINS, WORKERS = 16, 2
N_RECORDS, N_KEYS = 60_000, 12_000
# the heartbeat timeout, and the outage budgets the driver declares (Kafka's clients need >= 30 s)
TIMEOUT_S, OUTAGE_S = 15.0, 30.0


def _logged_epochs(log: Path) -> set[int]:
    """Epochs the driver logged as committed (the line follows the DB commit, so a driver paused
    between the two logs an epoch committed before the pause only once it resumes)."""
    found = (re.search(r"ballast\.runner: epoch (\d+) time ms", line)
             for line in log.read_text(errors="replace").splitlines())
    return {int(f.group(1)) for f in found if f}


def test_a_paused_driver_resumed_after_a_relaunch_is_fenced(kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                            db_url, monkeypatch):
    job = unique_name[-24:].strip("-")
    topic = f"{job}.in"
    make_topics({topic: 4})
    produce(kafka_bootstrap, topic, zipf_keys(N_RECORDS, N_KEYS, seed=29), partitions=4)
    state = tmp_path / "state"
    monkeypatch.setenv("BALLAST_STATE_DIR", str(state))
    jobs = write_jobs_file(
        tmp_path / "jobs.yaml", job, BINS, initial_workers=WORKERS, heartbeat_timeout_s=TIMEOUT_S,
        startup_grace_s=120, extra_args=["--trigger-ms", "200", "--max-offsets-per-trigger", "1500",
                                         "--snapshot-every", "2", "--db-outage-s", str(OUTAGE_S),
                                         "--kafka-outage-s", str(OUTAGE_S)])
    cfg = load_jobs(jobs)[job]
    ckpt = Path(cfg.resolved_checkpoint_dir())
    spark_ckpt = ckpt / "spark"
    env = {**os.environ, "BALLAST_DB_URL": db_url, "BALLAST_SPARK_LOG_LEVEL": "ERROR"}
    # the first driver: the supervisor's own command, started where the supervisor has no pid file
    # of it (another host, a lost pid file): it cannot stop it, only fence it. Its executors' caches
    # are its own, as on another host.
    old_log = tmp_path / "old-driver.log"
    with open(old_log, "wb") as out:
        old = subprocess.Popen([*supervisor.cli_command(cfg, kafka_bootstrap), "--cache-dir", str(tmp_path / "cache0")],
                               cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    new_pid = None
    try:
        wait_until(lambda: len(committed_epochs(spark_ckpt)) >= 6 or old.poll() is not None, 300,
                   "the first driver to commit 6 epochs", poll=0.2)
        assert old.poll() is None, old_log.read_text(errors="replace")[-3000:]
        paused_at = max(committed_epochs(spark_ckpt)) + 1
        # Spark writes an epoch's offsets before it runs the epoch: pause half a second into it (the
        # driver, its JVM and Python workers), inside foreachBatch under this load
        wait_until(lambda: (spark_ckpt / "offsets" / str(paused_at)).exists(), 120, f"epoch {paused_at} to start",
                   poll=0.05)
        time.sleep(0.5)
        _pause_outside_a_db_write(old.pid, db_url)
        token = store.token_row(db_url, job, "keycount")
        assert token is not None and token.token == 1 and token.outage_s == OUTAGE_S

        # the supervisor waits out the heartbeat timeout AND the outage the driver said it may wait
        hb = store.heartbeat(db_url, job, "keycount")  # written in each epoch's commit transaction
        assert hb is not None and hb.pid == old.pid
        committed_before_pause = hb.last_epoch
        wait_until(lambda: supervisor.check(cfg, db_url).status == "stale", TIMEOUT_S + OUTAGE_S + 60,
                   "the paused driver's heartbeat to go stale", poll=1.0)
        age = time.time() - hb.updated_at.timestamp()
        assert age > TIMEOUT_S + OUTAGE_S, f"stale after {age:.0f}s: the outage allowance was not applied"
        h = supervisor.supervise(cfg, kafka_bootstrap, db_url)  # one real pass: relaunch
        assert h.status == "starting" and h.pid is not None and "relaunched" in h.message, h
        new_pid = h.pid
        wait_until(lambda: (t := store.token_row(db_url, job, "keycount")) is not None and t.token == 2, 180,
                   "the relaunched driver to take token 2")
        # the newer driver replays the paused epoch and goes on, its retention removing old epochs
        wait_until(lambda: (b := store.heartbeat(db_url, job, "keycount")) is not None and b.pid == new_pid
                   and b.last_epoch >= paused_at + 7, 300, "the relaunched driver to commit 8 more epochs", poll=1.0)

        os.killpg(old.pid, signal.SIGCONT)
        rc = old.wait(timeout=240)
        text = old_log.read_text(errors="replace")
        assert rc == FENCED_EXIT, f"exit code {rc}:\n{text[-4000:]}"
        assert "driver fenced: job" in text and "holds driver token 1, but the metrics DB has token 2" in text, \
            text[-4000:]
        assert "ballast.cli: driver fenced" in text, "the exit's diagnosis is not the fencing: " + text[-4000:]
        late = sorted(e for e in _logged_epochs(old_log) if e > committed_before_pause)
        assert not late, (f"the fenced driver committed epoch(s) {late} after it resumed (its last commit before "
                          f"the pause: epoch {committed_before_pause})")
        hb = store.heartbeat(db_url, job, "keycount")
        assert hb is not None and hb.pid == new_pid and hb.status == "running", hb

        def drained() -> bool:
            eps = committed_epochs(spark_ckpt)
            end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
            return bool(end) and sum(end.get(topic, {}).values()) == N_RECORDS

        wait_until(drained, 420, "the relaunched driver to read all input", poll=1.0)
        assert supervisor.stop(cfg, timeout_s=120) is not None
    finally:
        if old.poll() is None:
            os.killpg(old.pid, signal.SIGCONT)
            killpg(old)
        if new_pid is not None:
            supervisor.stop(cfg, timeout_s=60)
    driver_log = (state / "jobs" / job / "driver.log").read_text(errors="replace")
    assert "stopped after epoch" in driver_log, driver_log[-3000:]

    epochs = committed_epochs(spark_ckpt)
    ref_counts, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, spark_ckpt, epochs)
    outs, dups = read_output(kafka_bootstrap, f"{job}.output")  # asserts one value per ballast-id
    got = outputs_as_set(outs)
    assert len(got) == len(outs), "an output doubled under two ids"
    assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
    check_state(str(ckpt / "state"), WORKERS, uniform_assignment(BINS, WORKERS), BINS, ref_counts)
    where = "inside the epoch" if "ERROR ballast.runner: driver fenced" in text else "after the query failed"
    print(f"paused in epoch {paused_at}, fenced {where}; epochs={len(epochs)} outputs={len(outs)} "
          f"duplicates dropped={dups}")


def _pause_outside_a_db_write(pgid: int, db_url: str) -> None:
    """SIGSTOP the driver's process group, but not while it holds SQLite's write lock: a paused
    writer would lock every reader and the relaunched driver out (in CI at 1c78293 the test's own
    token read got "database is locked"). PostgreSQL has no such lock: paused once."""
    if not db_url.startswith("sqlite:///"):
        os.killpg(pgid, signal.SIGSTOP)
        return
    path = db_url.removeprefix("sqlite:///")
    for _ in range(100):
        os.killpg(pgid, signal.SIGSTOP)
        try:
            c = sqlite3.connect(path, timeout=0.2)
            try:
                c.execute("BEGIN IMMEDIATE")
                c.rollback()
                return
            finally:
                c.close()
        except sqlite3.OperationalError:  # the paused driver holds the lock: let it finish the write
            os.killpg(pgid, signal.SIGCONT)
            time.sleep(0.02)
    raise AssertionError("the driver held the metrics DB's write lock at every pause")

