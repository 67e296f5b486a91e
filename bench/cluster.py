"""Experiment 5, `cluster`: what the cluster-native data plane costs and buys, each figure a ratio
against a baseline measured in the same run.

1. `durable_vs_local` — per-epoch cost of durable state (changelog objects, snapshots, manifests
   under `--state-uri`) against the previous data plane's local-only LMDB stores (git commit
   `255fb5a`, run from a `git worktree` checkout): same key-count job, local[2], same input topic,
   same open-loop load and trigger, one after the other. Median `epoch_metrics.batch_ms` and
   `worker_metrics.useful_ms` per epoch from each run's own metrics DB.
2. `precopy` — the cut-over pause of one step with `"precopy": true` against the same step without:
   one local[2] job with a prefilled state, single-step plans moving the same bins back and forth.
   The receiving tasks' move time (`checkpoints.migration_ms`: `moved_in` ms summed per receiving
   worker, max over workers) and the cut-over epoch's `batch_ms`.
3. `recovery` — SIGKILL of one executor on a loopback standalone cluster (2 workers x 1 core):
   time from the kill to the first epoch committed after it, against Spark's own RocksDB
   `groupBy(key).count()` (bench/native_job.py) on the same cluster, same input, same kill.
4. `scale_out` — the same cluster grown to 4 workers while the job holds 2 executors (W=2);
   under an open-loop load above what W=2 sustains, a batched plan to W=4: throughput before and
   after, and the longest gap between epochs during the change.

`python -m bench.run --full --only cluster`; the profile is CLUSTER_SMOKE / CLUSTER_FULL below,
overridable with `--set 'extra={"cluster": {"keys": 500000}}'`. docs/benchmarks.md explains it.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import report as rp
from bench.ballast_job import BallastJob, JobSpec, OffsetLogTail, make_steps
from bench.experiments import Ctx, _gen_stats, _prefill, _prog_end, _read_progress, _start_gen
from bench.infra import PY, REPO, Proc, ensure_topics, unix, wait_until

OLD_COMMIT = "255fb5a"  # the last data plane with local-only stores (no --state-uri)


@dataclass
class ClusterProfile:
    # 1 + 2: one local[2] topic; the old and the new data plane read it one after the other
    keys: int = 100_000
    bins: int = 64
    rate: float = 1000.0  # open-loop rows/s during the measured windows
    trigger_ms: int = 500
    max_offsets: int = 50_000  # maxOffsetsPerTrigger (catch-up of the prefill)
    steady_s: float = 8.0  # measured window per data plane
    skip_s: float = 2.0  # dropped at the start of each window (end of the catch-up)
    min_epochs: int = 6  # the window lasts until this many epochs started in it (a loaded machine is slow)
    precopy_fraction: float = 0.25  # of the bins, moved by each single-step plan
    precopy_reps: int = 1  # pairs (without, with); directions and order alternate
    settle_epochs: int = 2  # epochs between two plans
    # 3 + 4: a loopback standalone cluster, 1 core per worker, the job submitted in client mode
    cluster_keys: int = 6_000
    cluster_bins: int = 32
    cluster_trigger_ms: int = 500
    cluster_max_offsets: int = 2_000
    recovery_rate: float = 300.0
    recovery_steady_s: float = 4.0
    kill_delay_s: float = 0.2  # after an observed commit: the kill lands early in the next epoch
    recovery_timeout_s: float = 240.0
    observe_s: float = 12.0  # after the kill, the same window for both systems
    scale_rate: float = 2_500.0  # above what W=2 sustains at cluster_max_offsets per epoch
    scale_warm_s: float = 3.0
    scale_window_s: float = 5.0
    scale_min_epochs: int = 4  # each throughput window lasts at least this many epochs
    scale_steps: int = 2
    scale_settle_s: float = 2.0
    timeout_s: float = 900.0


CLUSTER_SMOKE = ClusterProfile()
CLUSTER_FULL = ClusterProfile(
    keys=2_000_000, bins=256, rate=2_000.0, max_offsets=200_000, steady_s=40.0, skip_s=4.0, min_epochs=30,
    precopy_reps=3,
    settle_epochs=4, cluster_keys=200_000, cluster_bins=128, cluster_max_offsets=5_000, recovery_rate=500.0,
    recovery_steady_s=15.0, observe_s=90.0, scale_rate=4_000.0, scale_warm_s=10.0, scale_window_s=30.0,
    scale_min_epochs=12,
    scale_steps=4, scale_settle_s=5.0, timeout_s=3600.0,
)


def profile_for(ctx: Ctx) -> ClusterProfile:
    base = CLUSTER_FULL if ctx.profile.name == "full" else CLUSTER_SMOKE
    over = dict((ctx.profile.extra or {}).get("cluster", {}))
    bad = [k for k in over if not hasattr(base, k)]
    if bad:
        raise ValueError(f"unknown cluster profile field(s) {bad}")
    return replace(base, **over)


# ----------------------------------------------------------------------------- processes


class EnvProc(Proc):
    """bench.infra.Proc with its own environment and working directory (the old checkout's job
    must not see this checkout: `python -m` puts the working directory first on sys.path, in the
    driver and in Spark's Python workers)."""

    def __init__(self, args: list[str], log: Path, name: str, env: dict[str, str], cwd: Path) -> None:
        super().__init__(args, log, name)
        self.env, self.cwd = env, cwd

    def start(self) -> EnvProc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as fh:
            self.p = subprocess.Popen(self.args, stdout=fh, stderr=subprocess.STDOUT, env=self.env, cwd=str(self.cwd),
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        return self


def kill_group(proc: Proc) -> None:
    """SIGKILL the process group of a child started in its own session (spark-submit's JVM and the
    Python driver it launched), whether or not its leader has exited."""
    if proc.p is None:
        return
    try:
        os.killpg(proc.p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def topic_rows(bootstrap: str, topic: str) -> int:
    from bench.loadgen import end_offsets

    return sum(end_offsets(bootstrap, topic, 2))


def spark_cluster_module():  # type: ignore[no-untyped-def]
    """scripts/spark_cluster.py as a module (a script directory, not a package)."""
    name = "ballast_spark_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "spark_cluster.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


# ----------------------------------------------------------------------------- metrics DB (plain SQL)
# The old data plane has its own (older) schema, so both DBs are read with the columns they share.


def _sqlite_path(db_url: str) -> str:
    assert db_url.startswith("sqlite:///"), db_url
    return db_url[len("sqlite:///"):]


def _ts(v: Any) -> float:
    if v is None:
        return math.nan
    d = datetime.fromisoformat(str(v))
    return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp()


def read_epochs(db_url: str, job: str) -> list[dict[str, Any]]:
    if not Path(_sqlite_path(db_url)).exists():
        return []  # the job has not created its DB yet
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        rows = con.execute("SELECT epoch, input_rows, batch_ms, migration_ms, backlog, workers, started_at, ended_at "
                           "FROM epoch_metrics WHERE job = ? ORDER BY epoch", (job,)).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []  # nor its schema
        raise
    finally:
        con.close()
    return [{"epoch": r[0], "input_rows": r[1], "batch_ms": r[2], "migration_ms": r[3], "backlog": r[4],
             "workers": r[5], "started_at": _ts(r[6]), "ended_at": _ts(r[7])} for r in rows]


def read_workers(db_url: str, job: str) -> dict[int, list[dict[str, Any]]]:
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        rows = con.execute("SELECT epoch, worker, records_in, useful_ms, wall_ms FROM worker_metrics WHERE job = ?",
                           (job,)).fetchall()
    finally:
        con.close()
    out: dict[int, list[dict[str, Any]]] = {}
    for e, w, rec, useful, wall in rows:
        out.setdefault(e, []).append({"worker": w, "records_in": rec, "useful_ms": useful, "wall_ms": wall})
    return out


def _queued_epoch(db_url: str, job: str, plan_id: str) -> int | None:
    """The epoch that received a step and queued it (a pre-copy step: the warming epoch)."""
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        r = con.execute("SELECT min(epoch) FROM step_decisions WHERE job = ? AND plan_id = ? AND action = 'queue'",
                        (job, plan_id)).fetchone()
    finally:
        con.close()
    return r[0] if r else None


def _heartbeat_executors(db_url: str, job: str) -> int | None:
    con = sqlite3.connect(_sqlite_path(db_url), timeout=30)
    try:
        r = con.execute("SELECT executors FROM heartbeats WHERE job = ?", (job,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        con.close()
    return r[0] if r else None


class SnapshotTail(OffsetLogTail):
    """Which epochs took a state snapshot (every `--snapshot-every` epochs each worker writes its
    whole state): read from the durable manifests while the job runs, since retention deletes them.
    The polling thread is bench.ballast_job.OffsetLogTail's."""

    def __init__(self, state_dir: Path, interval_s: float = 0.5) -> None:
        super().__init__(Path(state_dir), "", interval_s)
        self.dir = Path(state_dir) / "manifest"
        self.snapshots: set[int] = set()
        self.seen: set[str] = set()

    def _scan(self) -> None:
        try:
            names = [n for n in os.listdir(self.dir) if n.endswith(".json") and n not in self.seen]
        except FileNotFoundError:
            return
        for n in names:
            try:
                doc = json.loads((self.dir / n).read_text())
            except (OSError, ValueError):
                continue  # deleted by retention meanwhile, or being replaced: the next scan decides
            self.seen.add(n)
            if doc.get("snapshot"):
                self.snapshots.add(int(doc["epoch"]))

    def stop(self) -> set[int]:  # type: ignore[override]
        super().stop()
        return self.snapshots


def _median(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else math.nan


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(x for x in xs if x == x)
    if not xs:
        return math.nan
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


def _ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else math.nan


def epoch_cost(db_url: str, job: str, t0: float, t1: float, snapshots: set[int] | None = None) -> dict[str, Any]:
    """Per-epoch cost over epochs that started in [t0, t1] and read input: batch_ms and the
    operator's useful time (sum over workers, and the busiest worker); with `snapshots` (the epochs
    that wrote a state snapshot), also the median batch_ms of the other epochs."""
    eps = [e for e in read_epochs(db_url, job) if t0 <= e["started_at"] <= t1 and e["input_rows"] > 0]
    wk = read_workers(db_url, job)
    rows = []
    for e in eps:
        ws = wk.get(e["epoch"], [])
        rows.append({**e, "useful_ms_sum": sum(w["useful_ms"] for w in ws),
                     "useful_ms_max": max((w["useful_ms"] for w in ws), default=math.nan),
                     "records_in": sum(w["records_in"] for w in ws),
                     "snapshot": None if snapshots is None else e["epoch"] in snapshots})
    b = [r["batch_ms"] for r in rows]
    plain = [r["batch_ms"] for r in rows if not r["snapshot"]]
    return {"epochs": len(rows), "rows": rows, "batch_ms_median": _median(b),
            "batch_ms_mean": statistics.fmean(b) if b else math.nan, "batch_ms_p90": _pct(b, 90),
            "batch_ms_max": max(b, default=math.nan),
            "useful_ms_median": _median([r["useful_ms_sum"] for r in rows]),
            "useful_ms_max_worker_median": _median([r["useful_ms_max"] for r in rows]),
            "input_rows_median": _median([r["input_rows"] for r in rows]),
            # per row: the two runs' epochs may differ in size (a busier machine makes longer epochs read more)
            "batch_ms_per_1k_rows": 1000 * sum(b) / max(1, sum(r["input_rows"] for r in rows)) if rows else math.nan,
            "useful_us_per_row": (1000 * sum(r["useful_ms_sum"] for r in rows)
                                  / max(1, sum(r["records_in"] for r in rows))) if rows else math.nan,
            "snapshot_epochs": None if snapshots is None else sum(1 for r in rows if r["snapshot"]),
            "batch_ms_median_no_snapshot": _median(plain) if snapshots is not None else math.nan}


def measured_window(db_url: str, job: str, C: ClusterProfile, proc: Proc) -> tuple[float, float]:
    """From now (the load has just started): at least `steady_s`, and until `min_epochs` epochs with
    input have started `skip_s` in. Returns (t0, t1) for epoch_cost(t0 + skip_s, t1)."""
    t0 = time.time()
    time.sleep(C.steady_s)
    wait_until(lambda: len([e for e in read_epochs(db_url, job)
                            if e["started_at"] >= t0 + C.skip_s and e["input_rows"] > 0]) >= C.min_epochs,
               C.timeout_s, f"{C.min_epochs} measured epochs of {job}", poll=0.5, proc=proc)
    return t0, time.time()


def _wait_rows(db_url: str, job: str, total: int, timeout: float, proc: Proc, what: str) -> None:
    wait_until(lambda: sum(e["input_rows"] for e in read_epochs(db_url, job)) >= total, timeout, what, poll=1.0,
               proc=proc)


# ============================================================================ 1 + 2: local[2]


def _old_checkout(ctx: Ctx, where: Path) -> Path:
    wt = where / "wt"
    r = subprocess.run(["git", "worktree", "add", "--detach", str(wt), OLD_COMMIT], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"git worktree add {OLD_COMMIT} failed: {r.stderr}")
    return wt


def _remove_checkout(wt: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=REPO, capture_output=True, timeout=120)
    subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True, timeout=120)


def run_old_job(ctx: Ctx, C: ClusterProfile, wt: Path, topic: str, rows_before: int, out: Path) -> dict[str, Any]:
    """The local-only data plane of OLD_COMMIT on the same topic: catch up, then the open loop."""
    job = ctx.name("cl-old")
    db_url = f"sqlite:///{out / 'old-metrics.db'}"
    env = {**os.environ, "PYTHONPATH": f"{wt}{os.pathsep}{wt / 'plugins'}", "PYSPARK_PYTHON": PY,
           "BALLAST_CACHE_DIR": str(REPO / ".cache"), "BALLAST_LOG_LEVEL": "INFO"}
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    ckpt = ctx.run_dir / "ckpt" / job
    proc = EnvProc([PY, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", "keycount", "--input-topic", topic,
                    "--bins", str(C.bins), "--workers", "2", "--checkpoint-dir", str(ckpt), "--state-dir",
                    str(ckpt / "state"), "--bootstrap", ctx.bootstrap, "--db-url", db_url,
                    "--trigger-ms", str(C.trigger_ms), "--max-offsets-per-trigger", str(C.max_offsets)],
                   ctx.run_dir / "logs" / f"{job}.log", f"old data plane {job}", env, wt).start()
    gen = None
    try:
        _wait_rows(db_url, job, rows_before, C.timeout_s, proc, f"{job} to read {rows_before} rows")
        gen, sched = _start_gen(ctx, topic, C.keys, f"{C.rate}:100000", "cl-old")
        t0, t1 = measured_window(db_url, job, C, proc)
    finally:
        if gen is not None:
            gen.stop(timeout=30)
        proc.stop(timeout=180)
    log = proc.log.read_text(errors="replace")
    # the job that ran must be the old one: its effective configuration has state_dir, no state_uri
    if '"state_dir"' not in log or '"state_uri"' in log:
        raise RuntimeError(f"the job in {proc.log} is not the {OLD_COMMIT} data plane (check PYTHONPATH/cwd)")
    cost = epoch_cost(db_url, job, t0 + C.skip_s, t1)
    return {"job": job, "db_url": db_url, "t0": t0, "t1": t1, "generator": _gen_stats(sched), **cost,
            "rows_read": sum(e["input_rows"] for e in read_epochs(db_url, job))}


def emit_step(job: BallastJob, moves: list[tuple[int, int, int]], precopy: bool, plan_id: str) -> float:
    """One single-step plan (optionally pre-copy) on the job's control topic; returns the send time."""
    from kafka import KafkaProducer

    from ballast.protocol import ControlStep, Move, control_topic, message_key

    ver, w, _ = job.current_map()
    now = datetime.now(UTC)
    msg = ControlStep(job=job.spec.job, operator=job.spec.operator, plan_id=plan_id, step=1, steps=1,
                      kind="moves" if moves else "noop",
                      moves=tuple(Move(b, s, d) for b, s, d in moves), workers=w, map_version=ver, issued_at=now,
                      effective_at=now, reason=f"bench cluster: precopy={precopy}", precopy=precopy)
    if job._producer is None:
        job._producer = KafkaProducer(bootstrap_servers=job.spec.bootstrap, acks="all")
    job._producer.send(control_topic(job.spec.job), key=message_key(job.spec.job, job.spec.operator),
                       value=msg.to_json()).get(timeout=30)
    return now.timestamp()


def precopy_moves(assignment: list[int], fraction: float) -> list[tuple[int, int, int]]:
    """`fraction` of the bins, half from worker 0 to 1 and half from 1 to 0, spread over the key space."""
    n = max(2, int(round(len(assignment) * fraction)))
    out = []
    for src, dst in ((0, 1), (1, 0)):
        owned = [b for b, w in enumerate(assignment) if w == src]
        stride = max(1, len(owned) // (n // 2))
        out += [(b, src, dst) for b in owned[::stride][: n // 2]]
    return out


def run_precopy(ctx: Ctx, C: ClusterProfile, job: BallastJob, snaps: SnapshotTail) -> list[dict[str, Any]]:
    db = ctx.db_url
    _, _, assignment = job.current_map()
    moves = precopy_moves(assignment, C.precopy_fraction)
    # a no-op step first: the job's first applied step pays first-time costs of its own (the first
    # checkpoint and acknowledgement), which must not land on whichever measured step comes first
    warm_up = f"bench-precopy-warmup-{uuid.uuid4().hex[:6]}"
    emit_step(job, [], False, warm_up)
    job.wait_plan(warm_up, 1, C.timeout_s)
    rows = []
    for rep in range(C.precopy_reps):
        for precopy in ((False, True) if rep % 2 == 0 else (True, False)):
            job.wait_epochs(C.settle_epochs, C.timeout_s)
            before = [e["batch_ms"] for e in read_epochs(db, job.spec.job)[-6:] if e["input_rows"] > 0]
            pid = f"bench-precopy-{'on' if precopy else 'off'}-{uuid.uuid4().hex[:6]}"
            t_emit = emit_step(job, moves, precopy, pid)
            cp = job.wait_plan(pid, 1, C.timeout_s)[0]
            job.wait_epochs(1, C.timeout_s)  # the cut-over epoch's metrics (and manifest) are in
            time.sleep(1.0)
            eps = {e["epoch"]: e for e in read_epochs(db, job.spec.job)}
            cut = eps.get(cp.applied_epoch, {})
            warm_e = _queued_epoch(db, job.spec.job, pid) if precopy else None
            warm = eps.get(warm_e, {}) if warm_e is not None else {}
            rows.append({"precopy": precopy, "rep": rep, "plan_id": pid, "bins": len(moves),
                         "keys_moved": cp.keys_moved, "bytes_moved": cp.bytes_moved,
                         "cutover_ms": cp.migration_ms, "cutover_epoch": cp.applied_epoch,
                         "cutover_batch_ms": cut.get("batch_ms", math.nan),
                         "cutover_input_rows": cut.get("input_rows"),
                         "warm_epoch": warm_e, "warm_batch_ms": warm.get("batch_ms", math.nan),
                         # an epoch that also wrote a state snapshot is slower for that reason
                         "cutover_snapshot": cp.applied_epoch in snaps.snapshots,
                         "warm_snapshot": warm_e in snaps.snapshots if warm_e is not None else None,
                         "steady_batch_ms": _median(before), "t_emit": t_emit})
            ctx.log(f"[cluster/precopy] precopy={precopy}: {len(moves)} bins, {cp.keys_moved} keys at the cut-over, "
                    f"move {cp.migration_ms:.0f} ms, cut-over epoch {rows[-1]['cutover_batch_ms']:.0f} ms")
            moves = [(b, d, s) for b, s, d in moves]  # the next plan moves them back
    return rows


def _start_with_env(job: BallastJob, **env: str) -> BallastJob:
    """BallastJob.start() with extra environment variables for its process (bench.infra.env copies
    os.environ when the process starts)."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return job.start()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def local_session(ctx: Ctx, C: ClusterProfile, out: Path) -> dict[str, Any]:
    topic = ctx.name("cl-local") + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    _prefill(ctx, topic, C.keys)
    res: dict[str, Any] = {"topic": topic, "keys": C.keys, "bins": C.bins}
    tmp = Path(tempfile.mkdtemp(prefix="ballast-old-"))
    wt = None
    try:
        wt = _old_checkout(ctx, tmp)
        ctx.log(f"[cluster] old data plane {OLD_COMMIT} checked out in {wt}")
        res["old"] = run_old_job(ctx, C, wt, topic, C.keys, out)
    finally:
        if wt is not None:
            _remove_checkout(wt)
        shutil.rmtree(tmp, ignore_errors=True)
    old = res["old"]
    ctx.log(f"[cluster] old: median batch {old['batch_ms_median']:.0f} ms, useful {old['useful_ms_median']:.0f} ms "
            f"over {old['epochs']} epochs")
    spec = JobSpec(job=ctx.name("cl-new"), input_topic=topic, bins=C.bins, workers=2, db_url=ctx.db_url,
                   bootstrap=ctx.bootstrap, run_dir=ctx.run_dir, trigger_ms=C.trigger_ms,
                   max_offsets_per_trigger=C.max_offsets)
    # DEBUG: the runner then logs each epoch's phases (pre-apply + apply, DB, acks): where a cut-over epoch's
    # time goes beyond the tasks' move time
    job = _start_with_env(BallastJob(spec), BALLAST_LOG_LEVEL="DEBUG")
    snaps = SnapshotTail(spec.checkpoint_dir / "state").start()
    gen = None
    try:
        _wait_rows(ctx.db_url, spec.job, topic_rows(ctx.bootstrap, topic), C.timeout_s, job.proc,
                   f"{spec.job} to catch up")  # type: ignore[arg-type]
        gen, sched = _start_gen(ctx, topic, C.keys, f"{C.rate}:100000", "cl-new")
        t0, t1 = measured_window(ctx.db_url, spec.job, C, job.proc)  # type: ignore[arg-type]
        time.sleep(1.0)  # the window's last manifest is read
        res["new"] = {"job": spec.job, "t0": t0, "t1": t1,
                      **epoch_cost(ctx.db_url, spec.job, t0 + C.skip_s, t1, set(snaps.snapshots))}
        new = res["new"]
        ctx.log(f"[cluster] new: median batch {new['batch_ms_median']:.0f} ms, useful {new['useful_ms_median']:.0f} "
                f"ms over {new['epochs']} epochs")
        try:
            res["precopy"] = run_precopy(ctx, C, job, snaps)
        except Exception:  # noqa: BLE001 - keep experiment 1's figures
            res["precopy_error"] = traceback.format_exc()
            ctx.log(f"!! [cluster/precopy] failed:\n{res['precopy_error']}")
    finally:
        if gen is not None:
            gen.stop(timeout=60)
            res["new_generator"] = _gen_stats(sched)
        job.stop()
        snaps.stop()
    phases = epoch_phases(job.proc.log) if job.proc is not None else {}
    for r in res.get("precopy", []):
        for k in ("cutover", "warm"):
            ph = phases.get(r[f"{k}_epoch"], {})
            r[f"{k}_apply_ms"], r[f"{k}_db_ms"] = ph.get("apply_ms", math.nan), ph.get("db_ms", math.nan)
    return res


def epoch_phases(log: Path) -> dict[int, dict[str, float]]:
    """epoch -> {apply_ms, db_ms, acks_ms} from the runner's DEBUG lines (driver side: decision, control
    rows, the Spark job that applies the epoch and the durable commit; the metrics DB; the acks)."""
    import re

    pat = re.compile(r"epoch (\d+) phases: pre-apply\+apply (\d+) ms, db (\d+) ms, acks (\d+) ms")
    out: dict[int, dict[str, float]] = {}
    for m in pat.finditer(log.read_text(errors="replace") if log.exists() else ""):
        out[int(m.group(1))] = {"apply_ms": float(m.group(2)), "db_ms": float(m.group(3)),
                                "acks_ms": float(m.group(4))}
    return out


# ============================================================================ 3 + 4: standalone


class SubmittedJob(BallastJob):
    """The Ballast job submitted to the loopback cluster (client mode, code shipped as --py-files)."""

    def __init__(self, spec: JobSpec, cluster: Any, conf: dict[str, str], max_offsets: int) -> None:
        super().__init__(spec)
        self.cluster, self.conf, self.max_offsets = cluster, conf, max_offsets

    @property
    def ckpt_uri(self) -> str:
        return f"file://{self.spec.checkpoint_dir}"

    def start(self) -> SubmittedJob:
        from spark_jobs.ship import job_archive

        sc = spark_cluster_module()
        s = self.spec
        args = ["run", "--job", s.job, "--operator", s.operator, "--input-topic", s.input_topic, "--bins", str(s.bins),
                "--workers", str(s.workers), "--checkpoint-dir", self.ckpt_uri, "--state-uri",
                f"{self.ckpt_uri}/durable",
                "--bootstrap", s.bootstrap, "--db-url", s.db_url, "--trigger-ms", str(s.trigger_ms),
                "--max-offsets-per-trigger", str(self.max_offsets), "--master-ui", self.cluster.ui_url]
        cmd = sc.spark_submit_cmd(self.cluster, str(REPO / "spark_jobs" / "main.py"), args,
                                  py_files=[str(job_archive())], conf=self.conf, name=f"ballast-{s.job}")
        env = {**sc.submit_env(), "BALLAST_SPARK_LOG_LEVEL": "ERROR", "BALLAST_LOG_LEVEL": "INFO"}
        self.proc = EnvProc(cmd, s.run_dir / "logs" / f"{s.job}.log", f"ballast job {s.job} (spark-submit)", env,
                            s.run_dir).start()
        return self

    def stop(self) -> None:
        """The stop file (SIGTERM would reach the spark-submit JVM, which stops abruptly), then the group."""
        if self.proc is not None and self.proc.alive():
            subprocess.run([PY, "-m", "spark_jobs.cli", "stop", "--checkpoint-dir", self.ckpt_uri], cwd=REPO,
                           capture_output=True, timeout=60)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            kill_group(self.proc)
        super().stop()


def _app_id(cluster: Any, name: str) -> str | None:
    """The master's id of the running application called `name` (None before it registers)."""
    apps = (cluster._try_status() or {}).get("activeapps", [])
    for app in apps:
        if app.get("name") == name:
            return str(app["id"])
    return None


def _app_executors(cluster: Any, app_name: str) -> list[Any]:
    app = _app_id(cluster, app_name)
    return cluster.executors(app) if app else []


def _kill_one(cluster: Any, app_name: str, rng: random.Random) -> dict[str, Any]:
    ex = _app_executors(cluster, app_name)
    if not ex:
        raise RuntimeError(f"no executor of {app_name} to kill")
    victim = rng.choice(ex)
    t = time.time()
    cluster.kill_executor(victim.pid, sig=signal.SIGKILL)
    return {"t_kill": t, "pid": victim.pid, "executor_id": victim.executor_id, "worker_index": victim.worker_index,
            "executors_before": len(ex)}


def recovery_figures(batches: list[dict[str, Any]], t_kill: float, C: ClusterProfile) -> dict[str, Any]:
    """The same figures for both systems from their batches ({end, duration_s}, unix s): the first
    completion after the kill, how long that batch took against the steady median before the kill,
    and over the observation window the longest batch and the longest gap without a completion."""
    before = [b for b in batches if t_kill - C.recovery_steady_s < b["end"] <= t_kill]
    after = sorted((b for b in batches if t_kill < b["end"] <= t_kill + C.observe_s), key=lambda b: b["end"])
    steady = _median([b["duration_s"] for b in before])
    if not after:
        return {"recovery_s": math.nan, "steady_batch_s": steady}
    first = after[0]
    last_before = max((b["end"] for b in batches if b["end"] <= t_kill), default=t_kill)
    ends = [last_before] + [b["end"] for b in after]
    return {"recovery_s": first["end"] - t_kill, "first_batch_s": first["duration_s"], "steady_batch_s": steady,
            "extra_s": first["duration_s"] - steady, "max_batch_s": max(b["duration_s"] for b in after),
            "max_gap_s": max(y - x for x, y in zip(ends, ends[1:])), "batches_observed": len(after),
            "timeline": [{**b, "start_rel_kill_s": b["end"] - b["duration_s"] - t_kill,
                          "t_rel_kill_s": b["end"] - t_kill} for b in batches
                         if t_kill - 2 * C.recovery_steady_s < b["end"] <= t_kill + C.observe_s]}


def native_recovery(ctx: Ctx, C: ClusterProfile, cluster: Any, topic: str, rows_before: int, conf: dict[str, str],
                    rng: random.Random, out: Path) -> dict[str, Any]:
    sc = spark_cluster_module()
    name = ctx.name("cl-native")
    prog = out / "native_recovery.progress.jsonl"
    cmd = sc.spark_submit_cmd(cluster, str(REPO / "bench" / "native_job.py"),
                              ["run", "--topic", topic, "--bootstrap", ctx.bootstrap, "--checkpoint",
                               str(ctx.run_dir / "ckpt" / name), "--partitions", "2", "--trigger-ms",
                               str(C.cluster_trigger_ms), "--max-offsets-per-trigger", str(C.cluster_max_offsets),
                               "--progress", str(prog)],
                              conf=conf, name=name)
    # native_job builds its session with spark_jobs.session.build_spark, which sets the master itself and
    # ships the job archive from this checkout (its executors run no Python: no --py-files, whose zip would
    # come first on the driver's sys.path and hide the checkout)
    env = {**sc.submit_env(), "SPARK_MASTER": cluster.master_url, "BALLAST_SPARK_LOG_LEVEL": "ERROR",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins")])}
    proc = EnvProc(cmd, ctx.run_dir / "logs" / f"{name}.log", "native job (spark-submit)", env, ctx.run_dir).start()
    gen = None
    try:
        wait_until(lambda: sum(x.get("numInputRows", 0) for x in _read_progress(prog)) >= rows_before, C.timeout_s,
                   "native job to read its input", poll=0.5, proc=proc)
        gen, _ = _start_gen(ctx, topic, C.cluster_keys, f"{C.recovery_rate}:100000", "cl-native")
        time.sleep(C.recovery_steady_s)
        n = len(_read_progress(prog))
        wait_until(lambda: len(_read_progress(prog)) > n, 120, "a native batch to complete", poll=0.05, proc=proc)
        time.sleep(C.kill_delay_s)
        kill = _kill_one(cluster, "bench-native", rng)  # native_job's session names the app itself
        t_kill = kill["t_kill"]
        wait_until(lambda: any(_prog_end(x) > t_kill for x in _read_progress(prog)), C.recovery_timeout_s,
                   "the native job's first batch after the kill", poll=0.2, proc=proc)
        time.sleep(max(0.0, t_kill + C.observe_s - time.time()))
    finally:
        if gen is not None:
            gen.stop(timeout=60)
        kill_group(proc)  # the measurement is over: no graceful stop needed
    batches = [{"batch": x["batchId"], "end": _prog_end(x), "duration_s": x["durationMs"]["triggerExecution"] / 1000,
                "input_rows": x.get("numInputRows", 0)} for x in _read_progress(prog)]
    return {**kill, **recovery_figures(batches, t_kill, C)}


def ballast_recovery(ctx: Ctx, C: ClusterProfile, job: SubmittedJob, cluster: Any, rng: random.Random
                     ) -> dict[str, Any]:
    db, name = ctx.db_url, job.spec.job
    time.sleep(C.recovery_steady_s)
    n = job.last_epoch()
    wait_until(lambda: job.last_epoch() > n, 120, "an epoch to commit", poll=0.05, proc=job.proc)
    time.sleep(C.kill_delay_s)
    kill = _kill_one(cluster, f"ballast-{name}", rng)
    t_kill = kill["t_kill"]
    wait_until(lambda: any(e["ended_at"] > t_kill for e in read_epochs(db, name)), C.recovery_timeout_s,
               "the first epoch after the kill", poll=0.2, proc=job.proc)
    # the replacement executor (the master relaunches it) registers some seconds after the kill and its
    # first tasks rebuild their caches from the durable state again; the heartbeat (written at every
    # commit) says when the job holds it again. What follows (the scale-out) starts once it does and a
    # few epochs ran with it.
    back = math.nan
    held = lambda: (_heartbeat_executors(db, name) or 0) >= kill["executors_before"]  # noqa: E731
    while time.time() < t_kill + C.observe_s:
        if back != back and held():
            back = time.time() - t_kill
        time.sleep(0.5)
    try:
        wait_until(held, C.recovery_timeout_s, "the job's heartbeat to report the replacement executor", poll=0.5,
                   proc=job.proc)
        if back != back:
            back = time.time() - t_kill
    except TimeoutError:
        pass
    job.wait_epochs(3, C.recovery_timeout_s)
    batches = [{"batch": e["epoch"], "end": e["ended_at"], "duration_s": e["batch_ms"] / 1000,
                "input_rows": e["input_rows"]} for e in read_epochs(db, name)]
    return {**kill, **recovery_figures(batches, t_kill, C), "executors_back_s": back}


def _throughput(eps: list[dict[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    """Rows/s over the epochs that ended in [t0, t1]: rows of all but the first / their span."""
    w = sorted((e for e in eps if t0 <= e["ended_at"] <= t1), key=lambda e: e["ended_at"])
    if len(w) < 2:
        return {"rows_per_s": math.nan, "epochs": len(w)}
    span = w[-1]["ended_at"] - w[0]["ended_at"]
    rows = sum(e["input_rows"] for e in w[1:])
    return {"rows_per_s": rows / span if span > 0 else math.nan, "epochs": len(w) - 1, "rows": rows,
            "span_s": span, "batch_ms_median": _median([e["batch_ms"] for e in w[1:]]),
            # robust to one stalled epoch: the median epoch's rows per second of its own batch time
            "rows_per_batch_s_median": _median([e["input_rows"] / (e["batch_ms"] / 1000) for e in w[1:]
                                                if e["batch_ms"]]),
            "input_rows_median": _median([e["input_rows"] for e in w[1:]]),
            "backlog_first": w[0]["backlog"], "backlog_last": w[-1]["backlog"],
            "workers": sorted({e["workers"] for e in w})}


def _window(job: SubmittedJob, t0: float, C: ClusterProfile) -> dict[str, Any]:
    """Throughput over epochs ending from t0 on: at least `scale_window_s` and `scale_min_epochs` epochs."""
    db, name, min_epochs = job.spec.db_url, job.spec.job, C.scale_min_epochs
    time.sleep(max(0.0, t0 + C.scale_window_s - time.time()))
    wait_until(lambda: len([e for e in read_epochs(db, name) if e["ended_at"] >= t0]) >= min_epochs + 1,
               C.timeout_s, f"{min_epochs} epochs of {name}", poll=0.5, proc=job.proc)
    return _throughput(read_epochs(db, name), t0, time.time())


def scale_out(ctx: Ctx, C: ClusterProfile, job: SubmittedJob, cluster: Any, topic: str) -> dict[str, Any]:
    from ballast.policy import place

    db, name = ctx.db_url, job.spec.job
    for _ in range(2):
        cluster.add_worker()
    time.sleep(2)
    app = f"ballast-{name}"
    held_before = len(_app_executors(cluster, app))
    gen, sched = _start_gen(ctx, topic, C.cluster_keys, f"{C.scale_rate}:100000", "cl-scale")
    res: dict[str, Any] = {"rate": C.scale_rate, "max_offsets": C.cluster_max_offsets,
                           "workers_alive": cluster.capacity()["workers"], "executors_before": held_before,
                           "heartbeat_executors_before": _heartbeat_executors(db, name)}
    try:
        t0 = time.time()
        res["before"] = _window(job, t0 + C.scale_warm_s, C)
        ver, w, cur = job.current_map()
        load, size = job.bin_stats()
        target = place(cur, 4, [x + 1.0 for x in load], size)
        n_moving = sum(1 for a, b in zip(cur, target) if a != b)
        steps = make_steps(cur, ver, target, w, 4, size, load, "batched", max(1, math.ceil(n_moving / C.scale_steps)))
        pid = f"bench-scale-{uuid.uuid4().hex[:8]}"
        t_emit = job.emit(steps, pid, reason="bench cluster: scale-out 2 -> 4")
        cps = job.wait_plan(pid, len(steps), C.timeout_s)
        t_end = max(unix(c.completed_at) for c in cps)
        ctx.log(f"[cluster/scale-out] 2 -> 4: {len(steps)} steps, {n_moving} bins in {t_end - t_emit:.1f} s")
        res["after"] = _window(job, t_end + C.scale_settle_s, C)
        t_after = time.time()
        eps = read_epochs(db, name)
        # Spark may give the new executors their first tasks only epochs after the plan (until then the old
        # ones run every task); those first tasks pay a cold start: the gap is counted up to the window's end
        ends_all = sorted(e["ended_at"] for e in eps if t_emit - 10 <= e["ended_at"] <= t_after)
        gaps_all = [b - a for a, b in zip(ends_all, ends_all[1:]) if b >= t_emit]
        ends = sorted(e["ended_at"] for e in eps if t_emit - 10 <= e["ended_at"] <= t_end + C.scale_settle_s)
        gaps = [b - a for a, b in zip(ends, ends[1:]) if b >= t_emit]
        st_ends = sorted(e["ended_at"] for e in eps if t0 + C.scale_warm_s <= e["ended_at"] < t_emit)
        st_gaps = [b - a for a, b in zip(st_ends, st_ends[1:])]
        res.update({"t0": t0, "t_emit": t_emit, "t_end": t_end, "duration_s": t_end - t_emit, "steps": len(steps),
                    "bins_moved": n_moving, "keys_moved": sum(c.keys_moved for c in cps),
                    "move_ms_max_step": max(c.migration_ms for c in cps),
                    "max_epoch_gap_s": max(gaps) if gaps else math.nan,
                    "max_epoch_gap_to_end_s": max(gaps_all) if gaps_all else math.nan,
                    "steady_epoch_gap_s": _median(st_gaps), "executors_after": len(_app_executors(cluster, app)),
                    "heartbeat_executors_after": _heartbeat_executors(db, name),
                    "timeline": [{"epoch": e["epoch"], "t_s": e["ended_at"] - t0, "input_rows": e["input_rows"],
                                  "batch_ms": e["batch_ms"], "workers": e["workers"], "backlog": e["backlog"]}
                                 for e in eps if e["ended_at"] >= t0]})
    finally:
        gen.stop(timeout=60)
        res["generator"] = _gen_stats(sched)
    b = res.get("before", {})
    res["saturated_before"] = bool(b.get("input_rows_median", 0) >= 0.9 * C.cluster_max_offsets)
    return res


class ClusterStarter:
    """Starts the loopback cluster in a background thread: its JVMs come up while the local[2] half
    prefills and starts its first job (before any measured window), and idle afterwards."""

    def __init__(self, base_dir: Path) -> None:
        import threading

        self.base_dir = base_dir
        self.cluster: Any = None
        self.error: BaseException | None = None
        self.started_s = math.nan
        self._t = threading.Thread(target=self._run, name="cluster-start", daemon=True)

    def _run(self) -> None:
        t = time.time()
        try:
            self.cluster = spark_cluster_module().start_cluster(self.base_dir, workers=2, cores_per_worker=1,
                                                                memory_per_worker="1g", start_timeout=180)
            self.started_s = time.time() - t
        except BaseException as exc:  # noqa: BLE001 - re-raised by get()
            self.error = exc

    def start(self) -> ClusterStarter:
        self._t.start()
        return self

    def get(self) -> Any:
        self._t.join()
        if self.error is not None:
            raise RuntimeError(f"the standalone cluster did not start: {self.error}") from self.error
        return self.cluster

    def stop(self) -> None:
        self._t.join()
        if self.cluster is not None:
            self.cluster.stop()


def cluster_session(ctx: Ctx, C: ClusterProfile, out: Path, starter: ClusterStarter) -> dict[str, Any]:
    topic = ctx.name("cl-cluster") + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    _prefill(ctx, topic, C.cluster_keys)
    rng = random.Random(5)
    conf = {"spark.executor.cores": "1", "spark.executor.memory": "512m", "spark.locality.wait": "0",
            "spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false", "spark.log.level": "WARN"}
    res: dict[str, Any] = {"topic": topic, "keys": C.cluster_keys, "bins": C.cluster_bins, "conf": conf}
    cluster = starter.get()
    res["cluster_start_s"] = starter.started_s
    errors = []
    try:
        ctx.log(f"[cluster] standalone cluster up in {res['cluster_start_s']:.0f} s: {cluster.master_url}")
        # Spark's own stateful job first (it reads the prefill), then Ballast (prefill + the native phase's load)
        try:
            res["native"] = native_recovery(ctx, C, cluster, topic, C.cluster_keys, conf, rng, out)
            ctx.log(f"[cluster/recovery] native: first batch {res['native']['recovery_s']:.1f} s after the kill")
        except Exception:  # noqa: BLE001
            errors.append("native recovery:\n" + traceback.format_exc())
            ctx.log(f"!! {errors[-1]}")
        spec = JobSpec(job=ctx.name("cl-cluster"), input_topic=topic, bins=C.cluster_bins, workers=2,
                       db_url=ctx.db_url, bootstrap=ctx.bootstrap, run_dir=ctx.run_dir,
                       trigger_ms=C.cluster_trigger_ms)
        job = SubmittedJob(spec, cluster, conf, C.cluster_max_offsets).start()
        try:
            # everything on the topic so far: the prefill and the native phase's load
            _wait_rows(ctx.db_url, spec.job, topic_rows(ctx.bootstrap, topic), C.timeout_s, job.proc,
                       f"{spec.job} to catch up")  # type: ignore[arg-type]
            gen, sched = _start_gen(ctx, topic, C.cluster_keys, f"{C.recovery_rate}:100000", "cl-ballast")
            try:
                res["ballast"] = ballast_recovery(ctx, C, job, cluster, rng)
                ctx.log(f"[cluster/recovery] ballast: first epoch {res['ballast']['recovery_s']:.1f} s after the kill")
            except Exception:  # noqa: BLE001
                errors.append("ballast recovery:\n" + traceback.format_exc())
                ctx.log(f"!! {errors[-1]}")
            finally:
                gen.stop(timeout=60)
            try:
                res["scale_out"] = scale_out(ctx, C, job, cluster, topic)
            except Exception:  # noqa: BLE001
                errors.append("scale-out:\n" + traceback.format_exc())
                ctx.log(f"!! {errors[-1]}")
        except Exception:  # noqa: BLE001 - e.g. the job died catching up: keep the native figures
            errors.append("ballast job:\n" + traceback.format_exc())
            ctx.log(f"!! {errors[-1]}")
        finally:
            job.stop()
    finally:
        starter.stop()
    res["errors"] = errors
    return res


# ============================================================================ the experiment


def exp_cluster(ctx: Ctx) -> dict[str, Any]:
    C = profile_for(ctx)
    out = ctx.run_dir / "cluster"
    out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    local: dict[str, Any] = {}
    clus: dict[str, Any] = {}
    starter = ClusterStarter(ctx.run_dir / "cluster-spark").start()
    try:
        local = local_session(ctx, C, out)
        if local.get("precopy_error"):
            errors.append("precopy:\n" + local["precopy_error"])
    except Exception:  # noqa: BLE001 - the cluster half still runs
        errors.append("local session:\n" + traceback.format_exc())
        ctx.log(f"!! [cluster] local session failed:\n{errors[-1]}")
    try:
        clus = cluster_session(ctx, C, out, starter)
        errors += clus.get("errors", [])
    except Exception:  # noqa: BLE001
        errors.append("cluster session:\n" + traceback.format_exc())
        ctx.log(f"!! [cluster] cluster session failed:\n{errors[-1]}")
    finally:
        starter.stop()  # safe to repeat
    summary = summarize(C, local, clus)
    write_files(out, C, local, clus, summary)
    (out / "result.json").write_text(json.dumps(rp.clean({"local": _strip(local), "cluster": _strip(clus)}), indent=1))
    res: dict[str, Any] = {"summary": summary}
    if errors:
        res["errors"] = "\n".join(errors)
    ctx.shared["cluster"] = res
    return res


def _strip(d: dict[str, Any]) -> dict[str, Any]:
    """result.json without the per-epoch rows (those are in the CSVs)."""
    if not isinstance(d, dict):
        return d
    return {k: _strip(v) if isinstance(v, dict) else v for k, v in d.items() if k not in ("rows", "timeline")}


def summarize(C: ClusterProfile, local: dict[str, Any], clus: dict[str, Any]) -> dict[str, Any]:
    nan = math.nan
    old, new = local.get("old", {}), local.get("new", {})
    dvl = {
        "old_commit": OLD_COMMIT, "keys": C.keys, "bins": C.bins, "rate": C.rate, "trigger_ms": C.trigger_ms,
        "old_batch_ms": old.get("batch_ms_median", nan), "new_batch_ms": new.get("batch_ms_median", nan),
        "old_useful_ms": old.get("useful_ms_median", nan), "new_useful_ms": new.get("useful_ms_median", nan),
        "old_batch_ms_mean": old.get("batch_ms_mean", nan), "new_batch_ms_mean": new.get("batch_ms_mean", nan),
        "old_batch_ms_p90": old.get("batch_ms_p90", nan), "new_batch_ms_p90": new.get("batch_ms_p90", nan),
        "old_epochs": old.get("epochs", 0), "new_epochs": new.get("epochs", 0),
        "new_batch_ms_no_snapshot": new.get("batch_ms_median_no_snapshot", nan),
        "new_snapshot_epochs": new.get("snapshot_epochs"),
        "old_input_rows_median": old.get("input_rows_median", nan),
        "new_input_rows_median": new.get("input_rows_median", nan),
    }
    for k in ("batch_ms_per_1k_rows", "useful_us_per_row"):
        dvl[f"old_{k}"], dvl[f"new_{k}"] = old.get(k, nan), new.get(k, nan)
        dvl[f"{k}_ratio"] = _ratio(dvl[f"new_{k}"], dvl[f"old_{k}"])
    dvl["batch_ms_ratio"] = _ratio(dvl["new_batch_ms"], dvl["old_batch_ms"])
    dvl["useful_ms_ratio"] = _ratio(dvl["new_useful_ms"], dvl["old_useful_ms"])
    dvl["batch_ms_mean_ratio"] = _ratio(dvl["new_batch_ms_mean"], dvl["old_batch_ms_mean"])
    pcs = local.get("precopy", [])
    on = [r for r in pcs if r["precopy"]]
    off = [r for r in pcs if not r["precopy"]]

    def med(rows: list[dict[str, Any]], k: str) -> float:
        return _median([r[k] for r in rows])

    pre = {"keys": C.keys, "bins": C.bins, "bins_moved": pcs[0]["bins"] if pcs else 0, "reps": C.precopy_reps,
           "mode": "local[2]",
           "cutover_ms_with": med(on, "cutover_ms"), "cutover_ms_without": med(off, "cutover_ms"),
           "cutover_batch_ms_with": med(on, "cutover_batch_ms"),
           "cutover_batch_ms_without": med(off, "cutover_batch_ms"),
           "warm_batch_ms_with": med(on, "warm_batch_ms"), "steady_batch_ms": med(pcs, "steady_batch_ms"),
           "keys_moved_with": med(on, "keys_moved"), "keys_moved_without": med(off, "keys_moved"),
           "cutover_snapshots": sum(1 for r in pcs if r.get("cutover_snapshot")),
           "cutover_apply_ms_with": med(on, "cutover_apply_ms") if on and "cutover_apply_ms" in on[0] else nan,
           "cutover_apply_ms_without": med(off, "cutover_apply_ms") if off and "cutover_apply_ms" in off[0] else nan}
    pre["cutover_ms_ratio"] = _ratio(pre["cutover_ms_with"], pre["cutover_ms_without"])
    pre["cutover_batch_ms_ratio"] = _ratio(pre["cutover_batch_ms_with"], pre["cutover_batch_ms_without"])
    ratio = pre["cutover_ms_ratio"]
    pre["goal_met"] = bool(ratio <= 0.5) if ratio == ratio else None  # NaN: not measured
    nat, bal = clus.get("native", {}), clus.get("ballast", {})
    rec = {"mode": "standalone, 2 workers x 1 core", "keys": C.cluster_keys, "bins": C.cluster_bins,
           "rate": C.recovery_rate, "trigger_ms": C.cluster_trigger_ms,
           "observe_s": C.observe_s, "ballast_executors_back_s": bal.get("executors_back_s", nan),
           **{f"{who}_{k}": d.get(k, nan) for who, d in (("ballast", bal), ("native", nat))
              for k in ("first_batch_s", "steady_batch_s", "extra_s", "max_batch_s", "max_gap_s")},
           "ballast_s": bal.get("recovery_s", nan), "native_s": nat.get("recovery_s", nan)}
    rec["ballast_over_native"] = _ratio(rec["ballast_s"], rec["native_s"])
    so = clus.get("scale_out", {})
    sc = {"mode": "standalone, 4 workers x 1 core, job 2 -> 4 executors", "rate": C.scale_rate,
          "max_offsets": C.cluster_max_offsets,
          "throughput_before": so.get("before", {}).get("rows_per_s", nan),
          "throughput_after": so.get("after", {}).get("rows_per_s", nan),
          "epochs_before": so.get("before", {}).get("epochs"), "epochs_after": so.get("after", {}).get("epochs"),
          "rows_per_batch_s_median_before": so.get("before", {}).get("rows_per_batch_s_median", nan),
          "rows_per_batch_s_median_after": so.get("after", {}).get("rows_per_batch_s_median", nan),
          "max_epoch_gap_s": so.get("max_epoch_gap_s", nan), "steady_epoch_gap_s": so.get("steady_epoch_gap_s", nan),
          "max_epoch_gap_to_end_s": so.get("max_epoch_gap_to_end_s", nan),
          "duration_s": so.get("duration_s", nan), "steps": so.get("steps"), "bins_moved": so.get("bins_moved"),
          "executors_before": so.get("executors_before"), "executors_after": so.get("executors_after"),
          "saturated_before": so.get("saturated_before"),
          "batch_ms_before": so.get("before", {}).get("batch_ms_median", nan),
          "batch_ms_after": so.get("after", {}).get("batch_ms_median", nan),
          "machine_cores": os.cpu_count()}
    sc["throughput_ratio"] = _ratio(sc["throughput_after"], sc["throughput_before"])
    return {"durable_vs_local": dvl, "precopy": pre, "recovery": rec, "scale_out": sc,
            "profile": asdict(C)}


def write_files(out: Path, C: ClusterProfile, local: dict[str, Any], clus: dict[str, Any],
                s: dict[str, Any]) -> None:
    ep_rows = [{"data_plane": label, **{k: r[k] for k in ("epoch", "input_rows", "batch_ms", "useful_ms_sum",
                                                          "useful_ms_max")}}
               for label, key in (("local-only " + OLD_COMMIT, "old"), ("durable HEAD", "new"))
               for r in local.get(key, {}).get("rows", [])]
    rp.write_csv(out / "durable_vs_local_epochs.csv", ep_rows)
    rp.write_csv(out / "precopy.csv", local.get("precopy", []))
    tl = [{"system": sysname, **r} for sysname in ("ballast", "native")
          for r in clus.get(sysname, {}).get("timeline", [])]
    rp.write_csv(out / "recovery_timeline.csv", tl)
    rp.write_csv(out / "scale_out_epochs.csv", clus.get("scale_out", {}).get("timeline", []))
    d, p, r, so = s["durable_vs_local"], s["precopy"], s["recovery"], s["scale_out"]
    rp.plot_bars(out / "durable_vs_local.png", [f"local-only {OLD_COMMIT}", "durable (HEAD)"],
                 {"median batch ms": [d["old_batch_ms"], d["new_batch_ms"]],
                  "p90 batch ms": [d["old_batch_ms_p90"], d["new_batch_ms_p90"]],
                  "median useful ms (sum of workers)": [d["old_useful_ms"], d["new_useful_ms"]]},
                 f"per-epoch cost, local[2]: {C.keys} keys, B={C.bins}, {C.rate:.0f} rows/s, trigger {C.trigger_ms} ms")
    rp.plot_bars(out / "precopy.png", ["no pre-copy", "pre-copy"],
                 {"move ms at the cut-over": [p["cutover_ms_without"], p["cutover_ms_with"]],
                  "cut-over epoch batch ms": [p["cutover_batch_ms_without"], p["cutover_batch_ms_with"]],
                  "warming epoch batch ms": [math.nan, p["warm_batch_ms_with"]]},
                 f"one step moving {p['bins_moved']} of {C.bins} bins ({C.keys} keys), local[2]")
    if any(clus.get(k, {}).get("timeline") for k in ("ballast", "native")):
        plot_recovery(out / "recovery.png", clus, r, C)
    st = clus.get("scale_out", {}).get("timeline", [])
    if st:
        so_res = clus["scale_out"]
        xs = [x["t_s"] for x in st]
        rate = [x["input_rows"] / (x["batch_ms"] / 1000) if x["batch_ms"] else 0 for x in st]
        marks = [(so_res["t_emit"] - so_res["t0"], "plan"), (so_res["t_end"] - so_res["t0"], "done")] \
            if "t_emit" in so_res else []
        rp.plot_series(out / "scale_out.png", {"input rows / batch time": (xs, rate)},
                       f"scale-out 2 -> 4 executors on {os.cpu_count()} cores, {C.scale_rate:.0f} rows/s offered: "
                       f"{so['throughput_before']:.0f} -> {so['throughput_after']:.0f} rows/s",
                       "rows/s", marks=marks,
                       twin={"W": (xs, [x["workers"] for x in st])}, twin_label="workers")
    (out / "README.md").write_text(readme(C, s))


def plot_recovery(path: Path, clus: dict[str, Any], r: dict[str, Any], C: ClusterProfile) -> Path:
    """One row per system, one bar per batch from its start to its end (s after the kill)."""
    fig, ax = rp.plt.subplots(figsize=(10, 2.8))
    rows = (("ballast", "Ballast epochs", "C0"), ("native", "Spark RocksDB batches", "C1"))
    for y, (who, _label, color) in enumerate(rows):
        t = clus.get(who, {}).get("timeline", [])
        ax.broken_barh([(x["start_rel_kill_s"], x["duration_s"]) for x in t], (y - 0.35, 0.7), facecolors=color,
                       edgecolors="white", linewidth=0.6)
    ax.axvline(0.0, color="red", lw=1.2)
    ax.annotate("SIGKILL", (0.0, len(rows) - 0.5), fontsize=7, color="red", xytext=(3, 0), textcoords="offset points")
    ax.set_yticks(range(len(rows)), [label for _, label, _ in rows], fontsize=8)
    ax.set_xlabel("s after the executor was killed (each bar: one batch, start to commit)")
    ax.set_title(f"executor loss, 2 workers x 1 core: first commit after the kill Ballast {r['ballast_s']:.1f} s, "
                 f"Spark {r['native_s']:.1f} s; longest batch in {C.observe_s:.0f} s: {r['ballast_max_batch_s']:.1f} / "
                 f"{r['native_max_batch_s']:.1f} s", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return rp._save(fig, path)


def readme(C: ClusterProfile, s: dict[str, Any]) -> str:
    d, p, r, so = s["durable_vs_local"], s["precopy"], s["recovery"], s["scale_out"]
    f = rp.md_table
    return "\n".join([
        "# Cluster data plane", "",
        f"## Per-epoch cost: durable state vs local-only stores (local[2], {C.keys} keys, B={C.bins}, W=2)", "",
        f"Same key-count job and topic, open loop {C.rate:.0f} rows/s, trigger {C.trigger_ms} ms, one after the other: "
        f"the local-only data plane of `{OLD_COMMIT}` (git worktree), then this checkout. Epochs that started "
        f"{C.skip_s:.0f} s into each window (at least {C.steady_s:.0f} s and {C.min_epochs} epochs) and read input.",
        "",
        f([{"data plane": f"local-only ({OLD_COMMIT})", "epochs": d["old_epochs"],
            "rows/epoch": d["old_input_rows_median"],
            "batch ms median": d["old_batch_ms"], "mean": d["old_batch_ms_mean"], "p90": d["old_batch_ms_p90"],
            "useful ms median": d["old_useful_ms"]},
           {"data plane": "durable (HEAD)", "epochs": d["new_epochs"], "rows/epoch": d["new_input_rows_median"],
            "batch ms median": d["new_batch_ms"], "mean": d["new_batch_ms_mean"], "p90": d["new_batch_ms_p90"],
            "useful ms median": d["new_useful_ms"]}],
          ["data plane", "epochs", "rows/epoch", "batch ms median", "mean", "p90", "useful ms median"]), "",
        f"The durable run's window had {d['new_snapshot_epochs']} snapshot epoch(s) (every worker writes its whole "
        f"state; `--snapshot-every` 10); its median without them: {d['new_batch_ms_no_snapshot']:.0f} ms.", "",
        "Per input row (the runs' epochs can differ in size): batch ms per 1k rows "
        f"{d['old_batch_ms_per_1k_rows']:.0f} "
        f"-> {d['new_batch_ms_per_1k_rows']:.0f} (ratio {d['batch_ms_per_1k_rows_ratio']:.2f}), useful µs per row "
        f"{d['old_useful_us_per_row']:.1f} -> {d['new_useful_us_per_row']:.1f} "
        f"(ratio {d['useful_us_per_row_ratio']:.2f}).",
        "",
        f"Ratios durable / local-only: batch_ms **{d['batch_ms_ratio']:.2f}** (mean {d['batch_ms_mean_ratio']:.2f}), "
        f"useful_ms **{d['useful_ms_ratio']:.2f}** (useful = the tasks' fold time summed over workers; the durable "
        "object write comes after it and shows in batch_ms only).", "",
        f"## Cut-over pause with and without pre-copy (local[2], {C.keys} keys, {p['bins_moved']} of {C.bins} bins)",
        "",
        f([{"step": "without pre-copy", "move ms": p["cutover_ms_without"],
            "cut-over epoch ms": p["cutover_batch_ms_without"],
            "of which apply phase ms": p["cutover_apply_ms_without"], "keys at cut-over": p["keys_moved_without"],
            "warming epoch ms": math.nan},
           {"step": "with pre-copy", "move ms": p["cutover_ms_with"], "cut-over epoch ms": p["cutover_batch_ms_with"],
            "of which apply phase ms": p["cutover_apply_ms_with"], "keys at cut-over": p["keys_moved_with"],
            "warming epoch ms": p["warm_batch_ms_with"]}],
          ["step", "move ms", "cut-over epoch ms", "of which apply phase ms", "keys at cut-over", "warming epoch ms"]),
        "",
        "Apply phase = the runner's driver-side time up to the durable commit (control rows, decision, the Spark "
        "job whose tasks move and fold, the manifest); the rest of an epoch is the metrics DB, acks and Spark's "
        "own micro-batch work.", "",
        f"Medians over {C.precopy_reps} pair(s) (every plan in precopy.csv; `cutover_snapshot` marks a cut-over "
        f"epoch that also wrote a state snapshot: {p['cutover_snapshots']} of them); steady epoch "
        f"{p['steady_batch_ms']:.0f} ms. Ratio with / without: move "
        f"**{p['cutover_ms_ratio']:.2f}** (goal <= 0.5), cut-over epoch **{p['cutover_batch_ms_ratio']:.2f}**. "
        "The pre-copy "
        "step loads the bins in the epoch that receives it (warming epoch), inside that epoch's tasks.", "",
        "## Recovery after an executor loss (standalone, 2 workers x 1 core)", "",
        f([{"system": label, "kill -> first commit s": r[f"{who}_s"], "that batch s": r[f"{who}_first_batch_s"],
            "steady batch s": r[f"{who}_steady_batch_s"], "extra s": r[f"{who}_extra_s"],
            f"longest batch in {C.observe_s:.0f} s": r[f"{who}_max_batch_s"],
            f"longest gap in {C.observe_s:.0f} s": r[f"{who}_max_gap_s"]}
           for who, label in (("ballast", "Ballast (durable state)"), ("native", "Spark groupBy.count (RocksDB)"))],
          ["system", "kill -> first commit s", "that batch s", "steady batch s", "extra s",
           f"longest batch in {C.observe_s:.0f} s", f"longest gap in {C.observe_s:.0f} s"]), "",
        f"{C.cluster_keys} keys, {C.recovery_rate:.0f} rows/s, trigger {C.cluster_trigger_ms} ms, "
        f"maxOffsetsPerTrigger {C.cluster_max_offsets}; SIGKILL of one executor {C.kill_delay_s} s after a "
        f"commit was observed; both jobs watched for {C.observe_s:.0f} s after it. The master relaunches the "
        "executor; until it registers the surviving one runs both tasks (Ballast: the lost worker's bins are "
        "rebuilt there from the durable state), and the replacement's first tasks pay a cold start (Python "
        f"workers, Kafka consumer, and for Ballast the cache rebuild again). Ballast's heartbeat (written at each "
        f"commit) reported 2 executors again {r['ballast_executors_back_s']:.0f} s after the kill.", "",
        f"## Scale-out 2 -> 4 executors (standalone, 4 workers x 1 core on {so['machine_cores']} cores)", "",
        f([{"phase": "before (W=2)", "epochs": so["epochs_before"], "rows/s": so["throughput_before"],
            "median batch ms": so["batch_ms_before"],
            "median epoch rows / batch s": so["rows_per_batch_s_median_before"],
            "executors": so["executors_before"]},
           {"phase": "after (W=4)", "epochs": so["epochs_after"], "rows/s": so["throughput_after"],
            "median batch ms": so["batch_ms_after"], "median epoch rows / batch s": so["rows_per_batch_s_median_after"],
            "executors": so["executors_after"]}],
          ["phase", "epochs", "rows/s", "median batch ms", "median epoch rows / batch s", "executors"]), "",
        "rows/s = the window's input rows / its span (what the job sustained); the median epoch's rows per second "
        "of its own batch time is the same without the gaps between epochs and robust to one stalled epoch.", "",
        f"Offered {C.scale_rate:.0f} rows/s (open loop), maxOffsetsPerTrigger {C.cluster_max_offsets}; saturated "
        f"before: {so['saturated_before']}. Plan: {so['steps']} batched steps, {so['bins_moved']} bins, "
        f"{so['duration_s']:.1f} s; longest gap between epochs during it **{so['max_epoch_gap_s']:.2f} s** (steady "
        f"{so['steady_epoch_gap_s']:.2f} s); from the plan to the end of the after window (the new executors' "
        f"first tasks, whenever Spark schedules them, pay a cold start): {so['max_epoch_gap_to_end_s']:.2f} s. "
        f"Four 1-core executors on a {so['machine_cores']}-core machine cannot "
        "be faster than two: this measures what the change costs, not a speed-up.", "",
        "![](durable_vs_local.png)", "", "![](precopy.png)", "", "![](recovery.png)", "", "![](scale_out.png)", "",
    ])


def report_section(s: dict[str, Any]) -> str:
    """The headline table of REPORT.md: each figure against its same-run baseline."""
    d, p, r, so = s["durable_vs_local"], s["precopy"], s["recovery"], s["scale_out"]
    rows = [
        {"figure": "median batch ms per epoch (local[2])", "baseline": f"local-only {d['old_commit']}",
         "baseline_value": d["old_batch_ms"], "value": d["new_batch_ms"], "ratio": d["batch_ms_ratio"]},
        {"figure": "median operator useful ms per epoch", "baseline": f"local-only {d['old_commit']}",
         "baseline_value": d["old_useful_ms"], "value": d["new_useful_ms"], "ratio": d["useful_ms_ratio"]},
        {"figure": f"cut-over move ms ({p['bins_moved']} bins, {p['keys']} keys)", "baseline": "no pre-copy",
         "baseline_value": p["cutover_ms_without"], "value": p["cutover_ms_with"], "ratio": p["cutover_ms_ratio"]},
        {"figure": "cut-over epoch batch ms", "baseline": "no pre-copy",
         "baseline_value": p["cutover_batch_ms_without"],
         "value": p["cutover_batch_ms_with"], "ratio": p["cutover_batch_ms_ratio"]},
        {"figure": "executor SIGKILL -> first commit s", "baseline": "Spark RocksDB groupBy.count",
         "baseline_value": r["native_s"], "value": r["ballast_s"], "ratio": r["ballast_over_native"]},
        {"figure": f"throughput rows/s, 2 -> 4 executors ({so['machine_cores']} cores)", "baseline": "before (W=2)",
         "baseline_value": so["throughput_before"], "value": so["throughput_after"], "ratio": so["throughput_ratio"]},
        {"figure": "longest epoch gap during 2 -> 4 s", "baseline": "steady gap",
         "baseline_value": so["steady_epoch_gap_s"],
         "value": so["max_epoch_gap_s"], "ratio": _ratio(so["max_epoch_gap_s"], so["steady_epoch_gap_s"])},
    ]
    return rp.md_table(rows, ["figure", "baseline", "baseline_value", "value", "ratio"]) + \
        "\n\nDetails: cluster/README.md of the run (docs/benchmarks.md, experiment 5)."
