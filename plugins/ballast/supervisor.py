"""Launch + supervise the data-plane job without holding an Airflow task for the life of the stream.

docs/operations.md ("Traps"): SparkSubmitOperator in client mode blocks for the driver's life, and long tasks die of
token expiry and heartbeat failures. So a short task launches the driver detached (own session,
nohup semantics, output to a log file), records its pid, and returns; a scheduled health check
reads the job's heartbeat from the metrics DB and relaunches a job whose heartbeat is stale.
Only a process this module launched (pid file + matching command line) is ever signalled.
No Airflow import except `spark_submit_command`, which borrows the provider's command builder.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ballast import repository as repo
from ballast.config import REPO, JobConfig
from ballast.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)


def data_plane_args(cfg: JobConfig, bootstrap: str, db_url: str) -> list[str]:
    """Arguments of the data-plane entry point (`spark_jobs.cli run` and `spark_jobs/main.py`)."""
    return [
        "--job", cfg.job, "--operator", cfg.operator, "--input-topic", cfg.input_topic,
        "--bins", str(cfg.bins), "--workers", str(cfg.initial_workers),
        "--checkpoint-dir", cfg.resolved_checkpoint_dir(), "--bootstrap", bootstrap, "--db-url", db_url,
        *cfg.extra_args,
    ]


def cli_command(cfg: JobConfig, bootstrap: str, db_url: str) -> list[str]:
    return [sys.executable, "-m", "spark_jobs.cli", "run", *data_plane_args(cfg, bootstrap, db_url)]


def spark_submit_command(cfg: JobConfig, bootstrap: str, db_url: str) -> list[str]:
    """spark-submit command line from the provider's hook and the `spark_conn_id` connection (master, binary).

    `py_files` ships the three packages to the executors (spark_jobs/ship.py's archive)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from spark_jobs.ship import job_archive

    hook = SparkSubmitHook(
        conn_id=cfg.spark_conn_id, name=f"ballast-{cfg.job}",
        application_args=data_plane_args(cfg, bootstrap, db_url),
        conf={"spark.pyspark.python": sys.executable, "spark.pyspark.driver.python": sys.executable},
        py_files=str(job_archive()),
    )
    return hook._build_spark_submit_command(str(REPO / "spark_jobs" / "main.py"))


def _pid_file(cfg: JobConfig) -> Path:
    return cfg.state_dir() / "driver.pid"


def _our_process(cfg: JobConfig) -> int | None:
    """The pid we launched for this job if it is still alive and still runs this job."""
    try:
        pid = int(_pid_file(cfg).read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return pid  # no /proc (macOS): trust the pid file
    if "--job" in cmdline and cfg.job in cmdline:
        return pid
    return None  # pid reused by something else: never touch it


def launch(cfg: JobConfig, bootstrap: str, db_url: str, reason: str, security: KafkaSecurity | None = None) -> int:
    """Start the driver detached; record pid file and a `launch` event. Returns the pid.

    `security` (SASL/TLS of the `ballast_kafka` connection) reaches the job as BALLAST_KAFKA_CONFIG;
    the job's control keys come from BALLAST_CONTROL_KEYS in this environment (or its extra_args)."""
    from ballast.emitter import ensure_control_topics

    ensure_control_topics(bootstrap, cfg.job, security=security)
    cmd = cli_command(cfg, bootstrap, db_url) if cfg.launcher == "cli" else spark_submit_command(cfg, bootstrap, db_url)
    state = cfg.state_dir()
    state.mkdir(parents=True, exist_ok=True)
    logfile = state / "driver.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "BALLAST_DB_URL": db_url,
           "BALLAST_KAFKA_BOOTSTRAP": bootstrap, **(security.env() if security else {})}
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=REPO, start_new_session=True)
    _pid_file(cfg).write_text(str(proc.pid))
    repo.add_event(db_url, cfg.job, cfg.operator, "info", "launch",
                   f"launched {cfg.job} (pid {proc.pid}, {cfg.launcher}): {reason}",
                   details={"pid": proc.pid, "cmd": cmd, "log": str(logfile)})
    log.info("launched %s as pid %d (%s); driver log: %s\n  %s", cfg.job, proc.pid, reason, logfile, " ".join(cmd))
    return proc.pid


def stop(cfg: JobConfig, timeout_s: float = 30.0) -> bool:
    """Stop the driver we launched (SIGTERM to its process group, SIGKILL after timeout)."""
    pid = _our_process(cfg)
    if pid is None:
        return False
    os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    else:
        os.killpg(pid, signal.SIGKILL)
    _pid_file(cfg).unlink(missing_ok=True)
    return True


@dataclass(frozen=True)
class Health:
    status: str  # healthy | starting | stale | missing
    message: str
    pid: int | None = None


def check(cfg: JobConfig, db_url: str, now: datetime | None = None) -> Health:
    """Is the job alive? A fresh heartbeat says yes; a recent launch still starting says wait."""
    now = now or datetime.now(timezone.utc)
    hb = repo.heartbeat(db_url, cfg.job, cfg.operator)
    pid = _our_process(cfg)
    if hb and hb.status == "running" and (now - hb.updated_at).total_seconds() <= cfg.heartbeat_timeout_s:
        return Health("healthy", f"heartbeat {(now - hb.updated_at).total_seconds():.0f}s ago at epoch "
                                 f"{hb.last_epoch}, map v{hb.map_version}, {hb.workers} worker(s)", pid)
    launches = repo.events(db_url, cfg.job, cfg.operator, kind="launch", limit=1)
    if launches and pid is not None and (now - launches[0].at).total_seconds() < cfg.startup_grace_s:
        since = hb.updated_at if hb else None
        if since is None or since < launches[0].at:
            return Health("starting", f"launched {(now - launches[0].at).total_seconds():.0f}s ago (pid {pid}); "
                                      f"start-up grace {cfg.startup_grace_s:.0f}s", pid)
    if hb is None:
        return Health("missing", "no heartbeat recorded: the job has never run", pid)
    age = (now - hb.updated_at).total_seconds()
    return Health("stale", f"heartbeat is {age:.0f}s old (> {cfg.heartbeat_timeout_s:.0f}s), status {hb.status}, "
                           f"last epoch {hb.last_epoch}", pid)


def supervise(cfg: JobConfig, bootstrap: str, db_url: str, security: KafkaSecurity | None = None) -> Health:
    """One health check; relaunch when missing or stale (stopping our own stuck driver first)."""
    h = check(cfg, db_url)
    if h.status in ("healthy", "starting"):
        log.info("%s: %s — %s", cfg.job, h.status, h.message)
        return h
    if h.pid is not None:
        log.warning("%s: %s; stopping our stuck driver pid %d before relaunch", cfg.job, h.message, h.pid)
        stop(cfg)
    repo.add_event(db_url, cfg.job, cfg.operator, "warning" if h.status == "stale" else "info",
                   "restart" if h.status == "stale" else "start", h.message)
    pid = launch(cfg, bootstrap, db_url, h.message, security)
    return Health("starting", f"{h.message}; relaunched as pid {pid}", pid)
