"""Experiments 3 and 4 on a loopback standalone cluster: recovery from an executor's SIGKILL
(Ballast against Spark's own RocksDB job) and a live scale-out from 2 to 4 executors.
"""

from __future__ import annotations

import math
import random
import signal
import subprocess
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from bench.ballast_job import BallastJob, JobSpec, make_steps
from bench.cluster.metrics import heartbeat_executors, median, read_epochs, wait_rows
from bench.cluster.procs import EnvProc, kill_group, spark_cluster_module, topic_rows
from bench.cluster.profile import ClusterProfile
from bench.experiments import Ctx, _gen_stats, _prefill, _prog_end, _read_progress, _start_gen
from bench.infra import PY, REPO, ensure_topics, unix, wait_until


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
    and over the observation window the longest batch and the longest gap without a completion. The
    window reaches at least to that first completion: on a loaded machine it may come after
    `observe_s`, and a recovery slower than the window is a figure, not a missing one."""
    before = [b for b in batches if t_kill - C.recovery_steady_s < b["end"] <= t_kill]
    later = sorted((b for b in batches if t_kill < b["end"]), key=lambda b: b["end"])
    steady = median([b["duration_s"] for b in before])
    if not later:
        return {"recovery_s": math.nan, "steady_batch_s": steady}
    first = later[0]
    until = max(t_kill + C.observe_s, first["end"])
    after = [b for b in later if b["end"] <= until]
    last_before = max((b["end"] for b in batches if b["end"] <= t_kill), default=t_kill)
    ends = [last_before] + [b["end"] for b in after]
    return {"recovery_s": first["end"] - t_kill, "first_batch_s": first["duration_s"], "steady_batch_s": steady,
            "extra_s": first["duration_s"] - steady, "max_batch_s": max(b["duration_s"] for b in after),
            "max_gap_s": max(y - x for x, y in zip(ends, ends[1:])), "batches_observed": len(after),
            "timeline": [{**b, "start_rel_kill_s": b["end"] - b["duration_s"] - t_kill,
                          "t_rel_kill_s": b["end"] - t_kill} for b in batches
                         if t_kill - 2 * C.recovery_steady_s < b["end"] <= until]}


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
           "PYTHONPATH": str(REPO)}  # for bench/ (not installed); the rest comes from the editable install
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
    held = lambda: (heartbeat_executors(db, name) or 0) >= kill["executors_before"]  # noqa: E731
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
            "span_s": span, "batch_ms_median": median([e["batch_ms"] for e in w[1:]]),
            # robust to one stalled epoch: the median epoch's rows per second of its own batch time
            "rows_per_batch_s_median": median([e["input_rows"] / (e["batch_ms"] / 1000) for e in w[1:]
                                                if e["batch_ms"]]),
            "input_rows_median": median([e["input_rows"] for e in w[1:]]),
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
                           "heartbeat_executors_before": heartbeat_executors(db, name)}
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
                    "steady_epoch_gap_s": median(st_gaps), "executors_after": len(_app_executors(cluster, app)),
                    "heartbeat_executors_after": heartbeat_executors(db, name),
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
            wait_rows(ctx.db_url, spec.job, topic_rows(ctx.bootstrap, topic), C.timeout_s, job.proc,
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
