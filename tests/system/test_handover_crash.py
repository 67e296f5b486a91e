"""Crash tests during a handover's overlap (docs/handover.md, "In the data plane"; issue 24, item 4).

The sliding-window processor (tests/system/sliding_counts.py: `SlidingCounts`, 10 s windows every
5 s, 5 s of lateness; an event counts in two windows, so the moved bins' rows go to both owners)
runs on Kafka at 16 bins on 2 workers. A moves step with "handover": true hands 4 of worker 0's
bins to worker 1 mid-stream. While both owners hold the bins — the decision log has queued the
step ("handover: ...") and it has not applied — a process of the job is SIGKILLed:

- the driver (`python -m spark_jobs.cli run` on local Spark, its whole process group): first at the
  fault point `before_manifest` of the first overlap epoch after the test saw the step queued (the
  decision log queues it as the epoch is decided, so in practice the step's first epoch: the
  timestamps are journaled, both owners' tasks have written their state and committed their Kafka
  transactions, the epoch is not committed: its replay meets all of that), then, after a restart on
  the same checkpoint, at a random moment of a later overlap epoch; the journal and the clock log
  make each replay reuse the handover's timestamps;
- an executor of the loopback standalone cluster: its JVM stops itself in an overlap epoch's task
  at `worker_before_output_commit` (its changelog object durable, its cache committed, its Kafka
  transaction open with the epoch's outputs), and the test SIGKILLs that executor's JVM and every
  process under it; Spark runs the task again on the other executor, whose cache lacks the bins.

Oracle: each kill landed in the overlap (the killed epoch's decision lists the bins in an open
handover, none completing; no checkpoint of the step yet); every (user, window) exactly once and
equal to the pure-Python reference, for a plain read_committed consumer (no deduplication) and by
id; the step applied once, at an epoch after the kills, with one set of timestamps through every
replay (decision log and journal); its checkpoint with 4 bins, 0 keys, 0 bytes; the new owner's
task reports each bin moved in by "handover", 0 keys, 0 bytes; the final map; no state left but the
flush event's open windows; the migration property.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from ballast.protocol import Move
from migrations_db import models as m
from migrations_db.db import session_scope
from scripts.spark_cluster import SparkCluster, spark_submit_cmd
from scripts.spark_cluster_procs import descendants, stat
from spark_jobs.bins import uniform_assignment
from spark_jobs.handover import BinHandover, from_decision
from spark_jobs.journal import Journal
from spark_jobs.objects import read_meta
from spark_jobs.offsets import committed_epochs
from spark_jobs.output import read_output, scan_topic
from spark_jobs.runner import ensure_job_topics
from spark_jobs.ship import job_archive
from spark_jobs.storage import Location
from spark_jobs.txn_slots import Marker
from tests.helpers.cluster import JobDriver
from tests.helpers.control import live_step, send_control
from tests.helpers.dp_helpers import check_migration_property, checkpoints, consumed_rows, produce
from tests.helpers.kill_runs import cli_env, final_run, keys_with_state
from tests.helpers.procs import killpg
from tests.helpers.window_helpers import EXAMPLES, FLUSH_USER, as_tuple, flush_record, produce_events

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SLIDING = HERE / "sliding_counts.py"
OP = "sliding_counts:SlidingCounts"
BINS, MOVED, PLAN = 16, 4, "handover-crash"
WINDOW_MS, SLIDE_MS = 10_000, 5_000  # sliding_counts' windows
N_EVENTS, USERS = 1200, 60  # 20 ms of event time each: 24 s
# records per epoch: the overlap (10-15 s of event time, 500-750 events) spans 8-12 epochs, so the
# kills land in it and a restarted driver still finds it open
PER_EPOCH = 60
REASON = re.compile(r"handover: both owners get the bins' rows since epoch (\d+); the old owner finishes the "
                    r"windows up to (\d+) ms \(migration (\d+) ms, the new owner's windows from (\d+) ms\)")


def sliding_reference(evs: list[dict[str, Any]]) -> list[tuple[str, int, int, int]]:
    """Every (user, window start, count, total) of 10 s windows every 5 s (each event in two), sorted."""
    acc: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0])
    for e in evs:
        t = e["ms"]
        for start in (t - t % SLIDE_MS - SLIDE_MS, t - t % SLIDE_MS):
            a = acc[(e["user"], start)]
            a[0] += 1
            a[1] += e["amount"]
    return sorted((u, s, c, t) for (u, s), (c, t) in acc.items())


class HandoverUnderKills:
    """One job's handover step and what the test knows of it: sends the step, tells whether the
    overlap is open, notes each kill (and checks it landed in the overlap), runs the input to its
    end, and checks the outcome."""

    def __init__(self, bootstrap: str, db_url: str, job: str, topic: str, ckpt: Path, state_uri: str,
                 evs: list[dict[str, Any]]) -> None:
        self.bootstrap, self.db_url, self.job, self.topic = bootstrap, db_url, job, topic
        self.spark_ckpt = ckpt / "spark"
        self.journal = Journal(str(ckpt))
        self.state_uri = state_uri
        self.evs, self.expected = evs, sliding_reference(evs)
        self.bins: list[int] = []
        self.kills: list[tuple[str, int]] = []  # (how, the epoch it interrupted)
        self.flushed = False
        self.moved_in: dict[int, dict[str, Any]] | None = None
        self.tasks: list[dict[int, tuple[str, int]]] = []  # at the completion's epoch and the one before
        self.logged: dict[int, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {}  # at each kill

    # ------------------------------------------------------------------ driving --------
    def tick(self) -> None:
        """Sends the handover step once the job has committed two epochs (the busiest bins of worker 0)."""
        if self.bins or len(committed_epochs(self.spark_ckpt)) < 2:
            return
        on0 = [b for b, w in enumerate(uniform_assignment(BINS, 2)) if w == 0]
        records = dict.fromkeys(on0, 0)
        with session_scope(self.db_url) as s:
            for r in s.scalars(select(m.BinMetrics).where(m.BinMetrics.job == self.job)):
                if r.bin in records:
                    records[r.bin] += r.records
        bins = sorted(sorted(on0, key=lambda b: (-records[b], b))[:MOVED])
        step = live_step(self.job, PLAN, 0, operator=OP, kind="moves", moves=tuple(Move(b, 0, 1) for b in bins),
                         handover=True, reason="handover crash test")
        send_control(self.bootstrap, self.job, [step.to_json()], operator=OP)
        self.bins = bins

    def decisions(self) -> list[m.StepDecision]:
        with session_scope(self.db_url) as s:
            return sorted(s.scalars(select(m.StepDecision).where(m.StepDecision.job == self.job,
                                                                 m.StepDecision.plan_id == PLAN)),
                          key=lambda d: (d.epoch, d.seq))

    def queued(self) -> bool:
        """The decision log has queued the step as a handover: both owners get the bins' rows."""
        return any(d.action == "queue" and d.reason.startswith("handover:") for d in self.decisions())

    def checkpoint(self) -> m.StepCheckpoint | None:
        return checkpoints(self.db_url, self.job).get((PLAN, 1))

    def overlap_open(self) -> bool:
        """No checkpoint of the step, and the newest journaled control state (of an epoch that may
        not have committed) still holds the handover open."""
        st = self.journal.latest_state()
        return self.checkpoint() is None and st is not None and bool(st.handover)

    def note_kill(self, how: str) -> None:
        """After a kill: it interrupted an epoch of the overlap, or the job between two of them."""
        eps = committed_epochs(self.spark_ckpt)
        epoch = (eps[-1] if eps else -1) + 1
        assert self.overlap_open(), f"{how}: the handover was no longer open at the kill (epoch {epoch})"
        d = self.journal.load_decision(epoch)
        if d is not None:  # its decision was journaled: the tasks route the bins to both owners
            hs = from_decision(d.handover)
            assert sorted(h.bin for h in hs) == self.bins and not any(h.completes for h in hs), (how, epoch, hs)
        self.kills.append((how, epoch))
        # what the replay must reuse: the epoch's decision and clock as logged before the kill
        self.logged[epoch] = (d.to_dict() if d is not None else None, self._clock(epoch))

    def _clock(self, epoch: int) -> dict[str, Any] | None:
        return (self.journal.dir / "clock" / f"{epoch:012d}.json").read_json()

    def done(self) -> bool:
        """For the last run: the flush record once every event is consumed (it carries the watermark
        past every window), then the step's checkpoint (its new owner's report read at once: retention
        drops the epoch's objects later) and every window."""
        if not self.flushed and consumed_rows(self.spark_ckpt, self.topic) == len(self.evs):
            fk, fv = flush_record(self.evs)  # after the rest, so that it makes nothing late
            produce(self.bootstrap, self.topic, fk, 1, fv)
            self.flushed = True
        cp = self.checkpoint()
        if cp is not None and cp.status == "applied" and cp.applied_epoch is not None and self.moved_in is None:
            e = cp.applied_epoch
            self.moved_in = moved_in(self.state_uri, e, 1)
            self.tasks = [attempts(self.state_uri, e - 1), attempts(self.state_uri, e)]
        return self.flushed and self.moved_in is not None and len(self.outputs()) >= len(self.expected)

    def outputs(self) -> list[tuple[str, int, int, int]]:
        return sorted(as_tuple(json.loads(o.value)) for o in read_output(self.bootstrap, f"{self.job}.output")[0])

    # ------------------------------------------------------------------ oracle ---------
    def check(self) -> str:
        cp = self.checkpoint()
        assert cp is not None and cp.status == "applied", f"handover {cp and cp.status}: {cp and cp.reason}"
        applied = cp.applied_epoch
        assert applied is not None
        assert all(e < applied for _, e in self.kills), (self.kills, applied)
        # the decision log: queued at every epoch of the overlap, with one set of timestamps through
        # every kill and replay; applied exactly once
        ds = self.decisions()
        queued = [d for d in ds if d.action == "queue"]
        stamps = {REASON.match(d.reason).groups() for d in queued if REASON.match(d.reason)}  # type: ignore[union-attr]
        assert len(stamps) == 1, f"the handover's timestamps changed: {stamps}"
        since = int(next(iter(stamps))[0])
        assert all(since <= e for _, e in self.kills), (since, self.kills)
        assert [d.epoch for d in ds if d.action == "apply"] == [applied], [(d.epoch, d.action, d.reason) for d in ds]
        assert {d.epoch for d in queued} >= set(range(since, applied)), "an overlap epoch without its decision"
        # the journal: every epoch from the start to the completion routed the same handover
        want = {(b, 0, 1, since) for b in self.bins}
        per_epoch: dict[int, tuple[BinHandover, ...]] = {}
        for e in range(since, applied + 1):
            d = self.journal.load_decision(e)
            assert d is not None, f"epoch {e} of the handover has no journaled decision"
            per_epoch[e] = from_decision(d.handover)
            assert {(h.bin, h.src, h.dst, h.since) for h in per_epoch[e]} == want, (e, per_epoch[e])
            assert all(h.completes == (e == applied) for h in per_epoch[e]), (e, per_epoch[e])
        assert len({(h.activation_ms, h.boundary_ms) for hs in per_epoch.values() for h in hs}) == 1, per_epoch
        # each killed epoch was replayed with the decision and the clock logged before the kill
        for e, (decision, clock) in self.logged.items():
            if decision is not None:
                d = self.journal.load_decision(e)
                assert d is not None and d.to_dict() == decision, f"epoch {e} was decided again after the kill"
            if clock is not None:
                assert self._clock(e) == clock, f"epoch {e}'s clock changed after the kill"
        expected_map = list(uniform_assignment(BINS, 2))
        for b in self.bins:
            expected_map[b] = 1
        with session_scope(self.db_url) as s:
            latest = s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == self.job)
                               .order_by(m.RoutingMap.map_version.desc())).first()
            assert latest is not None
            assert (latest.map_version, latest.epoch, list(latest.assignment)) == (1, applied, expected_map)
        # every window exactly once: by id, and for a plain read_committed consumer with no deduplication
        got = self.outputs()
        assert len(set(got)) == len(got), "a (user, window) emitted twice under different ids"
        assert got == self.expected, (f"{len(set(got) - set(self.expected))} unexpected, "
                                      f"{len(set(self.expected) - set(got))} missing")
        committed = Counter(as_tuple(json.loads(msg.value)) for msg in scan_topic(
            self.bootstrap, f"{self.job}.output", 120.0, isolation_level="read_committed", consumer_timeout_ms=1000))
        assert max(committed.values()) == 1 and sorted(committed) == self.expected, "read_committed: not exactly once"
        # nothing of an emitted window is left in the durable state; the bins' metrics from their owner
        assert keys_with_state(self.state_uri, "user") == {FLUSH_USER}
        assert check_migration_property(self.db_url, self.job) > 0
        # no state moved: the checkpoint and the new owner's report of each bin (the new owner's task at
        # the completion and the epoch before: which Python worker, so which executor's cache, ran it)
        assert cp.map_version_after == 1
        assert self.moved_in is not None and set(self.moved_in) == set(self.bins), self.moved_in
        report = {b: (i.get("mode"), int(i["keys"]), int(i["bytes"])) for b, i in sorted(self.moved_in.items())}
        assert (cp.bins_moved, cp.keys_moved, cp.bytes_moved) == (MOVED, 0, 0) and \
            all(r == ("handover", 0, 0) for r in report.values()), (
            f"the handover completed at epoch {applied} with {cp.keys_moved} keys / {cp.bytes_moved} B moved; "
            f"the new owner's moved_in {report}; (attempt, pid) by worker at epochs {applied - 1}, {applied}: "
            f"{self.tasks}")
        return f"bins {self.bins} handed over: started at epoch {since}, killed {self.kills}, applied at {applied}"


def moved_in(state_uri: str, epoch: int, worker: int) -> dict[int, dict[str, Any]]:
    """The `moved_in` of `worker`'s task at `epoch`: the metadata of the changelog object its manifest names."""
    root = Location.of(state_uri)
    manifest = (root / "manifest" / f"{epoch:012d}.json").read_json()
    assert manifest is not None, f"no manifest of epoch {epoch}"
    name = manifest["changelog"].get(str(worker))
    assert name, f"the manifest of epoch {epoch} names no changelog object of worker {worker}: {manifest}"
    metrics = read_meta(root / "changelog" / f"{epoch:012d}" / name).get("metrics", {})
    return {int(b): info for b, info in (metrics.get("moved_in") or {}).items()}


def attempts(state_uri: str, epoch: int) -> dict[int, tuple[str, int]]:
    """worker -> (attempt, pid) of the changelog object the manifest of `epoch` names."""
    root = Location.of(state_uri)
    manifest = (root / "manifest" / f"{epoch:012d}.json").read_json() or {"changelog": {}}
    out = {}
    for w, name in manifest["changelog"].items():
        meta = read_meta(root / "changelog" / f"{epoch:012d}" / name)
        out[int(w)] = (str(meta.get("attempt")), int(meta.get("metrics", {}).get("pid", -1)))
    return out


def start_cli(cmd: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def test_driver_sigkilled_in_the_overlap_restarts_and_the_handover_completes_exactly_once(
        kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    t_start = time.monotonic()
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    evs, _ = produce_events(kafka_bootstrap, topic, 2, N_EVENTS, users=USERS, seed=37)
    ensure_job_topics(kafka_bootstrap, job, 2)
    ckpt, faults, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    faults.write_text("")
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", OP, "--input-topic", topic,
           "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", str(ckpt), "--bootstrap", kafka_bootstrap,
           "--db-url", db_url, "--trigger-ms", "100", "--max-offsets-per-trigger", str(PER_EPOCH)]
    env = cli_env(faults, HERE, EXAMPLES)  # the driver and its local Python workers import sliding_counts
    h = HandoverUnderKills(kafka_bootstrap, db_url, job, topic, ckpt, str(ckpt / "state"), evs)
    runs: list[str] = []

    # run 0: once the step is queued, the next epoch's driver SIGKILLs its process group before its manifest
    t0 = time.monotonic()
    proc = start_cli(cmd, env, logs / "run0.log")
    armed = False
    try:
        deadline = time.time() + 300
        while proc.poll() is None:
            assert time.time() < deadline, "run 0: no kill in the overlap:\n" + \
                (logs / "run0.log").read_text(errors="replace")[-3000:]
            h.tick()
            if not armed and h.bins and h.queued():
                faults.write_text("before_manifest 1\n")  # the process's next before_manifest
                armed = True
            time.sleep(0.2)
    finally:
        killpg(proc)
        faults.write_text("")
    text = (logs / "run0.log").read_text(errors="replace")
    assert "killing pid" in text and "at before_manifest" in text, text[-3000:]
    h.note_kill("before_manifest")
    runs.append(f"run 0 {time.monotonic() - t0:.0f}s")

    # run 1: the restart replays that epoch; an overlap epoch later, SIGKILL at a random moment
    t0 = time.monotonic()
    rng = random.Random(53)
    replayed = h.kills[-1][1]
    proc = start_cli(cmd, env, logs / "run1.log")
    try:
        deadline = time.time() + 300
        while not (committed_epochs(h.spark_ckpt)[-1] > replayed):
            assert time.time() < deadline and proc.poll() is None, "run 1 committed nothing past the replay:\n" + \
                (logs / "run1.log").read_text(errors="replace")[-3000:]
            time.sleep(0.2)
        time.sleep(rng.uniform(0.1, 1.0))
        assert proc.poll() is None, (logs / "run1.log").read_text(errors="replace")[-3000:]
    finally:
        killpg(proc)
    h.note_kill("SIGKILL at a random moment")
    runs.append(f"run 1 {time.monotonic() - t0:.0f}s")

    # the last run: to the end of the input, the flush, the handover's completion; then SIGTERM
    t0 = time.monotonic()
    final_run(cmd, env, logs / "final.log", h.done, timeout_s=400)
    runs.append(f"final {time.monotonic() - t0:.0f}s")
    assert "killing pid" not in (logs / "final.log").read_text(errors="replace")
    summary = h.check()
    print(f"[timing] test {time.monotonic() - t_start:.0f}s ({', '.join(runs)}); {summary}; "
          f"epochs {len(committed_epochs(h.spark_ckpt))}, windows {len(h.expected)}")


# ---------------------------------------------------------------------- executor loss --------
def stopped_executor(cluster: SparkCluster) -> Any:
    """The executor whose JVM has stopped itself (state T) at the fault, None while there is none."""
    for ex in cluster.executors():
        st = stat(ex.pid)
        if st is not None and st[2] == "T":
            return ex
    return None


def executor_logs(cluster: SparkCluster) -> str:
    """The executors' stdout and stderr (`<worker>/work/<app>/<executor>/`; not a walk of the whole
    tree, where a lost executor's block manager directories are being deleted meanwhile)."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(cluster.base_dir.glob("worker-*/work/*/*/std*"))
                     if p.name in ("stdout", "stderr") and p.is_file())


def markers(bootstrap: str, job: str, isolation: str) -> Counter:
    """(epoch, worker) of every marker record in the output's marker topic, as `isolation` reads it."""
    out: Counter = Counter()
    for msg in scan_topic(bootstrap, f"{job}.output.commits", 60.0, isolation_level=isolation,
                          consumer_timeout_ms=1000):
        mk = Marker.decode(msg.value)
        if mk is not None:
            out[(mk.epoch, mk.worker)] += 1
    return out


@pytest.mark.cluster
def test_executor_sigkilled_in_the_overlap_and_the_handover_completes_exactly_once(
        spark_cluster, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    t_start = time.monotonic()
    cluster = spark_cluster
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    evs, _ = produce_events(kafka_bootstrap, topic, 2, N_EVENTS, users=USERS, seed=41)
    ensure_job_topics(kafka_bootstrap, job, 2)
    ckpt = tmp_path / "ckpt"
    faults = tmp_path / "faults"
    faults.write_text("")
    cmd = spark_submit_cmd(
        cluster, str(REPO / "spark_jobs" / "main.py"),
        ["run", "--job", job, "--operator", OP, "--input-topic", topic, "--bins", str(BINS), "--workers", "2",
         "--checkpoint-dir", f"file://{ckpt}", "--state-uri", f"file://{ckpt}/durable",
         "--bootstrap", kafka_bootstrap, "--db-url", db_url, "--trigger-ms", "100",
         "--max-offsets-per-trigger", str(PER_EPOCH), "--master-ui", cluster.ui_url],
        py_files=[str(job_archive(tmp_path / "dist")), str(SLIDING), str(EXAMPLES / "window_counts.py")],
        conf={"spark.locality.wait": "0", "spark.task.maxFailures": "4", "spark.sql.shuffle.partitions": "2",
              "spark.executorEnv.BALLAST_FAULTS_FILE": str(faults)},
        name=f"ballast-{job}")
    h = HandoverUnderKills(kafka_bootstrap, db_url, job, topic, ckpt, f"file://{ckpt}/durable", evs)
    t0 = time.monotonic()
    driver = JobDriver.start(cmd, tmp_path)
    t_up = time.monotonic() - t0
    killed: list[int] = []
    try:
        # 1. once the step is queued, the next executor about to commit a task's Kafka transaction stops
        deadline = time.time() + 300
        found, armed = None, False
        while found is None:
            assert time.time() < deadline, "no executor stopped in the overlap:\n" + \
                driver.log.read_text(errors="replace")[-4000:]
            driver.alive()
            h.tick()
            if not armed and h.bins and h.queued():
                faults.write_text("worker_before_output_commit 1 stop\n")
                armed = True
            found = stopped_executor(cluster)
            time.sleep(0.2)
        # 2. SIGKILL the stopped executor: the JVM, then everything under it
        ex = found
        py = ex.pid
        killed = [ex.pid, *descendants(ex.pid)]
        cluster.kill_executor(ex.pid)
        for pid in killed[1:]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        t_kill = time.monotonic()
        faults.write_text("")
        h.note_kill(f"executor {ex.executor_id} SIGKILLed")
        frozen_epoch = h.kills[-1][1]
        # 3. Spark runs the lost task again; the job goes on to the end of the input and the handover
        recovered_s: float | None = None
        retried: dict[int, tuple[str, int]] = {}
        deadline = time.time() + 400
        while not h.done():
            assert time.time() < deadline, f"the job did not finish (kills {h.kills}):\n" + \
                driver.log.read_text(errors="replace")[-4000:]
            driver.alive()
            if recovered_s is None and committed_epochs(h.spark_ckpt)[-1] >= frozen_epoch:
                recovered_s = time.monotonic() - t_kill
                retried = attempts(h.state_uri, frozen_epoch)  # read now: retention drops the epoch later
            time.sleep(0.5)
        subprocess.run([sys.executable, "-m", "spark_jobs.cli", "stop", "--checkpoint-dir", f"file://{ckpt}"],
                       check=True, cwd=REPO)
        rc = driver.proc.wait(timeout=180)
    finally:
        for pid in killed:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if driver.proc.poll() is None:
            killpg(driver.proc)
    assert rc == 0, driver.log.read_text(errors="replace")[-4000:]
    assert f"[ballast-fault] stopping pid {py} at worker_before_output_commit" in executor_logs(cluster)
    # the killed attempt was inside its transaction: its marker of the frozen epoch is in the log
    # aborted (read_uncommitted: twice), the retry's committed (read_committed: once)
    committed, uncommitted = markers(kafka_bootstrap, job, "read_committed"), \
        markers(kafka_bootstrap, job, "read_uncommitted")
    assert max(committed.values()) == 1, committed
    aborted = sorted(k for k in uncommitted if k[0] == frozen_epoch and uncommitted[k] > committed[k])
    assert aborted and all(committed[k] == 1 for k in aborted), (frozen_epoch, uncommitted, committed)
    summary = h.check()
    assert recovered_s is not None
    print(f"[timing] test {time.monotonic() - t_start:.0f}s (driver up {t_up:.0f}s, the frozen epoch committed "
          f"{recovered_s:.1f}s after the kill); {summary}; the killed attempt's (epoch, worker) {aborted} "
          f"(worker 0 the old owner, 1 the new; executor pid {py}); the epoch's committed objects "
          f"(attempt, pid) by worker {retried}; epochs {len(committed_epochs(h.spark_ckpt))}, "
          f"windows {len(h.expected)}")
