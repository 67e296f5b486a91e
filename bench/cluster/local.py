"""Experiments 1 and 2 on local[2]: durable state against the old local-only data plane (run from a
`git worktree` of OLD_COMMIT on the same topic), and a pre-copy step against the same step without.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from bench.ballast_job import BallastJob, JobSpec
from bench.cluster.metrics import epoch_cost, measured_window, median, queued_epoch, read_epochs, wait_rows
from bench.cluster.procs import EnvProc, SnapshotTail, topic_rows
from bench.cluster.profile import OLD_COMMIT, ClusterProfile
from bench.experiments import Ctx, _gen_stats, _prefill, _start_gen
from bench.infra import PY, REPO, ensure_topics


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
        wait_rows(db_url, job, rows_before, C.timeout_s, proc, f"{job} to read {rows_before} rows", legacy=True)
        gen, sched = _start_gen(ctx, topic, C.keys, f"{C.rate}:100000", "cl-old")
        t0, t1 = measured_window(db_url, job, C, proc, legacy=True)
    finally:
        if gen is not None:
            gen.stop(timeout=30)
        proc.stop(timeout=180)
    log = proc.log.read_text(errors="replace")
    # the job that ran must be the old one: its effective configuration has state_dir, no state_uri
    if '"state_dir"' not in log or '"state_uri"' in log:
        raise RuntimeError(f"the job in {proc.log} is not the {OLD_COMMIT} data plane (check PYTHONPATH/cwd)")
    cost = epoch_cost(db_url, job, t0 + C.skip_s, t1, legacy=True)
    return {"job": job, "db_url": db_url, "t0": t0, "t1": t1, "generator": _gen_stats(sched), **cost,
            "rows_read": sum(e["input_rows"] for e in read_epochs(db_url, job, legacy=True))}


def emit_step(job: BallastJob, moves: list[tuple[int, int, int]], precopy: bool, plan_id: str) -> float:
    """One single-step plan (optionally pre-copy) through the job's control emitter; returns the send time."""
    from ballast.policy import MigrationStep
    from ballast.protocol import Move

    ver, w, _ = job.current_map()
    step = MigrationStep(step=1, moves=tuple(Move(b, s, d) for b, s, d in moves), workers=w, map_version=ver)
    return job.emit([step], plan_id, reason=f"bench cluster: precopy={precopy}", precopy=precopy)


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
            warm_e = queued_epoch(db, job.spec.job, pid) if precopy else None
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
                         "steady_batch_ms": median(before), "t_emit": t_emit})
            ctx.log(f"[cluster/precopy] precopy={precopy}: {len(moves)} bins, {cp.keys_moved} keys at the cut-over, "
                    f"move {cp.migration_ms:.0f} ms, cut-over epoch {rows[-1]['cutover_batch_ms']:.0f} ms")
            moves = [(b, d, s) for b, s, d in moves]  # the next plan moves them back
    return rows


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
                   max_offsets_per_trigger=C.max_offsets, log_level="DEBUG")
    # DEBUG: the runner then logs each epoch's phases (pre-apply + apply, DB, acks): where a cut-over epoch's
    # time goes beyond the tasks' move time
    job = BallastJob(spec).start()
    snaps = SnapshotTail(spec.checkpoint_dir / "state")
    snaps.start()
    gen = None
    try:
        wait_rows(ctx.db_url, spec.job, topic_rows(ctx.bootstrap, topic), C.timeout_s, job.proc,
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
    """epoch -> {apply_ms, db_ms, acks_ms} from the runner's `epoch N time ms:` lines
    (spark_jobs.epoch_times): apply is every driver phase before the metrics DB's commit (control
    rows, the decision, the plan, the Spark job that applies the epoch, the durable manifest, the
    backlog lookup), then the DB and the acks."""
    from spark_jobs.epoch_times import parse_log

    out: dict[int, dict[str, float]] = {}
    for e, (inside, _) in parse_log(log.read_text(errors="replace") if log.exists() else "").items():
        out[e] = {"apply_ms": sum(v for k, v in inside.items() if k not in ("db", "acks")),
                  "db_ms": inside.get("db", 0.0), "acks_ms": inside.get("acks", 0.0)}
    return out
