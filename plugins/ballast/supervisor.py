"""Launch + supervise the data-plane job without holding an Airflow task for the life of the stream.

docs/operations.md ("Traps"): SparkSubmitOperator in client mode blocks for the driver's life, and long tasks die of
token expiry and heartbeat failures. So a short task launches the driver detached (own session,
nohup semantics, output to a log file), records its pid, and returns; a scheduled health check
reads the job's heartbeat from the metrics DB and relaunches a job whose heartbeat is stale.
Launchers: `cli` runs `python -m spark_jobs.cli run` (local mode); `spark-submit` runs
`python -m ballast.launch`, which calls the Spark provider's `SparkSubmitHook.submit()`.
Secrets (metrics DB URL, Kafka SASL config, control keys) travel by environment, never argv, and
the `launch` event stores a redacted command. Only a process this module launched (pid file +
`--job <name>` in its command line) is ever signalled; `stop_all` is what `make down` calls.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ballast import store
from ballast.config import REPO, JobConfig
from ballast.errors import BallastError
from ballast.kafka_security import KafkaSecurity

log = logging.getLogger(__name__)
PID_FILE = "driver.pid"
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@/\s]+@")
_SECRET_FLAG = re.compile(r"^--?[\w.-]*(password|secret|token|key)[\w.-]*$", re.IGNORECASE)


class LaunchError(BallastError, RuntimeError):
    """The job cannot be launched as configured; the message says what to change."""


def redact(argv: list[str]) -> list[str]:
    """argv fit for logs and stored events: URL passwords and the values of secret-named flags masked."""
    out: list[str] = []
    for i, arg in enumerate(argv):
        if i and _SECRET_FLAG.match(argv[i - 1]) and "=" not in argv[i - 1]:
            out.append("***")
            continue
        flag, eq, value = arg.partition("=")
        if eq and _SECRET_FLAG.match(flag):
            out.append(f"{flag}=***")
            continue
        out.append(_URL_PASSWORD.sub(r"\1***@", arg))
    return out


def data_plane_args(cfg: JobConfig, bootstrap: str) -> list[str]:
    """Arguments of the data-plane entry point (`spark_jobs.cli run` and `spark_jobs/main.py`).

    No `--db-url`: the job reads BALLAST_DB_URL from its environment (see `launch`)."""
    return [
        "--job", cfg.job, *cfg.operator_args(), "--input-topic", cfg.input_topic,
        "--bins", str(cfg.bins), "--workers", str(cfg.initial_workers),
        "--checkpoint-dir", cfg.resolved_checkpoint_dir(), "--bootstrap", bootstrap,
        *signal_args(cfg), *(["--spark-ui"] if cfg.spark_ui else []),
        *(["--metrics-port", str(cfg.metrics_port)] if cfg.metrics_port is not None else []),
        *cfg.extra_args,
    ]


def signal_args(cfg: JobConfig) -> list[str]:
    """The job's signal thresholds (ballast.policy.signals) from its `rebalance:` section: the
    same band, budget, bounds and scale-down delay the guards and DS2 use."""
    rb = cfg.rebalance
    low, high = rb.target_utilization - rb.utilization_band, rb.target_utilization + rb.utilization_band
    return ["--signal-epochs", str(rb.signal_epochs), "--signal-hold-s", f"{rb.signal_hold_s:g}",
            "--signal-idle-hold-s", f"{rb.scale_down_delay_s:g}", "--signal-band", f"{max(low, 0.0):g},{high:g}",
            "--signal-budget-ms", f"{rb.batch_budget_s * 1000:g}",
            "--signal-workers", f"{cfg.min_workers},{cfg.max_workers}"]


def cli_command(cfg: JobConfig, bootstrap: str) -> list[str]:
    return [sys.executable, "-m", "spark_jobs.cli", "run", *data_plane_args(cfg, bootstrap)]


def spark_submit_kwargs(cfg: JobConfig, bootstrap: str) -> dict[str, Any]:
    """Keyword arguments of the provider's `SparkSubmitHook` for this job (JSON-serializable).

    `py_files` ships the three packages to the executors (spark_jobs/ship.py's archive); `jars`
    gives the driver the Kafka connector and Ballast's writer when this machine has them (`make setup`),
    else the Spark installation must carry them (docker/spark.Dockerfile, docker/airflow.Dockerfile)."""
    from spark_jobs.session import CONNECTOR_JARS, SINK_JARS
    from spark_jobs.ship import job_archive

    jars = sorted(str(p) for d in (CONNECTOR_JARS, SINK_JARS) for p in d.glob("*.jar"))
    return {
        "conn_id": cfg.spark_conn_id, "name": f"ballast-{cfg.job}",
        "application_args": ["run", *data_plane_args(cfg, bootstrap)],
        # executors may run elsewhere (docker/compose.yaml: another image), so their Python is
        # PYSPARK_PYTHON when set; the driver runs here, on this Python
        "conf": {"spark.pyspark.python": os.environ.get("PYSPARK_PYTHON") or sys.executable,
                 "spark.pyspark.driver.python": sys.executable},
        "py_files": str(job_archive()), "jars": ",".join(jars) or None,
    }


def _spark_connection_env(conn_id: str) -> dict[str, str]:
    """The Spark connection for the detached launcher, which runs outside the task's context.

    Resolved here (in the task, where Airflow's secrets are reachable) and handed over as
    AIRFLOW_CONN_<ID>. Cluster deploy mode is refused: the driver would start on the cluster
    without this environment, and its secrets would have to go on the spark-submit command line."""
    var = f"AIRFLOW_CONN_{conn_id.upper()}"
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException as exc:
        raise LaunchError(f"launcher spark-submit needs the Airflow connection {conn_id!r} (the Spark master, "
                          f"e.g. spark://host:7077 or local[2]): create it, or set {var}") from exc
    if (conn.extra_dejson.get("deploy-mode") or "client") != "client":
        raise LaunchError(f"connection {conn_id!r} asks for deploy-mode {conn.extra_dejson['deploy-mode']!r}: Ballast "
                          "launches in client mode (Spark standalone runs Python apps in client mode only, and the "
                          "job's secrets reach the driver by environment); remove the deploy-mode extra")
    return {} if var in os.environ else {var: conn.as_json()}


def launcher_command(cfg: JobConfig, bootstrap: str) -> tuple[list[str], dict[str, str]]:
    """The detached command for `cfg.launcher` and the extra environment it needs."""
    if cfg.launcher == "cli":
        return cli_command(cfg, bootstrap), {}
    spec = {"hook": spark_submit_kwargs(cfg, bootstrap), "application": str(REPO / "spark_jobs" / "main.py")}
    from ballast.launch import ENV_SUBMIT

    env = {ENV_SUBMIT: json.dumps(spec), **_spark_connection_env(cfg.spark_conn_id)}
    here = Path(sys.executable).parent  # pyspark's own spark-submit when none is on PATH
    if not shutil.which("spark-submit") and (here / "spark-submit").exists():
        env["PATH"] = f"{here}{os.pathsep}{os.environ.get('PATH', '')}"
    return [sys.executable, "-m", "ballast.launch", "--job", cfg.job], env


def _pid_file(cfg: JobConfig) -> Path:
    return cfg.state_dir() / PID_FILE


def _alive(pid: int) -> bool:
    """Running (not a zombie; an exited child of this very process is reaped here)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, PermissionError):
        return False
    except OSError:
        return True  # no /proc (macOS): kill(0) said enough
    return stat.rpartition(")")[2].split()[0] != "Z"


def _runs_job(pid: int, job: str) -> bool:
    """Does `pid` still run this job (`--job <job>` in its argv)? Guards against a reused pid.

    A process caught inside exec() shows an empty command line for a moment (Popen returns once
    the close-on-exec pipe shuts, before the kernel has set up the new argv): read again then."""
    deadline = time.monotonic() + 2.0
    while True:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return False
        except OSError:
            return True  # no /proc (macOS): trust the pid file
        if raw or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    argv = raw.decode(errors="replace").split("\0")
    return any(a == "--job" and b == job for a, b in zip(argv, argv[1:]))


def launched_pid(pid_file: Path, job: str) -> int | None:
    """The pid recorded in `pid_file` if it is alive and still runs `job`; else None (never signalled)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if _alive(pid) and _runs_job(pid, job) else None


def _our_process(cfg: JobConfig) -> int | None:
    return launched_pid(_pid_file(cfg), cfg.job)


def launch(cfg: JobConfig, bootstrap: str, db_url: str, reason: str, security: KafkaSecurity | None = None) -> int:
    """Start the driver (or the spark-submit launcher) detached; record pid file and a `launch` event.

    The DB URL reaches the job as BALLAST_DB_URL and `security` (SASL/TLS of the `ballast_kafka`
    connection) as BALLAST_KAFKA_CONFIG; the job's control keys come from BALLAST_CONTROL_KEYS in
    this environment (or its extra_args). Returns the pid (the process group leader)."""
    from ballast.emitter import ensure_control_topics

    ensure_control_topics(bootstrap, cfg.job, security=security)
    cmd, extra_env = launcher_command(cfg, bootstrap)
    state = cfg.state_dir()
    state.mkdir(parents=True, exist_ok=True)
    logfile = state / "driver.log"
    # the driver outlives whoever launched it (an Airflow task, `stack.py`): it does not carry the
    # launcher's service tag, so stopping the local Airflow does not stop the jobs it launched
    inherited = {k: v for k, v in os.environ.items() if k != "BALLAST_SERVICE_TAG"}
    env = {**inherited, "PYSPARK_PYTHON": sys.executable, "BALLAST_DB_URL": db_url,
           "BALLAST_KAFKA_BOOTSTRAP": bootstrap, **(security.env() if security else {}), **extra_env}
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=REPO, start_new_session=True)
    _pid_file(cfg).write_text(str(proc.pid))
    shown = redact(cmd)
    details: dict[str, Any] = {"pid": proc.pid, "cmd": shown, "log": str(logfile), "launcher": cfg.launcher}
    if cfg.launcher == "spark-submit":
        details["application_args"] = redact(["run", *data_plane_args(cfg, bootstrap)])
    store.add_event(db_url, cfg.job, cfg.operator, "info", "launch",
                   f"launched {cfg.job} (pid {proc.pid}, {cfg.launcher}): {reason}", details=details)
    log.info("launched %s as pid %d (%s); driver log: %s\n  %s", cfg.job, proc.pid, reason, logfile, " ".join(shown))
    return proc.pid


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of the process group `pgid`, from /proc ([] without /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            out.append(int(stat.parent.name))
    return out


def _drivers(pgid: int) -> list[int]:
    """The Python driver(s) in the group: `python -m spark_jobs.cli` (local mode, the group's
    leader) or the application file spark_jobs/main.py (under spark-submit's JVM)."""
    app = str(REPO / "spark_jobs" / "main.py").encode()
    out = []
    for member in group_members(pgid):
        try:
            argv = Path(f"/proc/{member}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if app in argv or b"spark_jobs.cli" in argv[1:3]:
            out.append(member)
    return out


def _terminate(pid: int, timeout_s: float) -> str:
    """Stop the process group led by `pid`; says how: "SIGTERM" (the driver stopped and took its
    group along), "SIGTERM to the group" or "SIGKILL after Ns".

    The group is the Python driver → its JVM (local mode), or launcher → spark-submit JVM → Python
    driver. SIGTERM goes to the driver first (to the leader when no driver is recognised): it stops
    after its current epoch and exits, the JVM ends with it (and the launcher returns).
    Signalling the whole group at once kills the JVM under the driver's feet, which then retries
    py4j calls until SIGKILL. What is left after half the timeout gets SIGTERM, SIGKILL at the end."""
    def gone() -> bool:
        return not _alive(pid) and not group_members(pid)

    def wait(until: float) -> bool:
        while time.monotonic() < until:
            if gone():
                return True
            time.sleep(0.3)
        return gone()

    start = time.monotonic()
    if gone():
        return "already gone"
    for target in _drivers(pid) or [pid]:  # no driver recognised: the leader, as a shell would
        try:
            os.kill(target, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if wait(start + timeout_s / 2):
        return "SIGTERM"
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return "SIGTERM"
    if wait(start + timeout_s):
        return "SIGTERM to the group"
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return "SIGTERM to the group"
    wait(start + timeout_s + 10)
    return f"SIGKILL after {timeout_s:.0f}s"


def stop(cfg: JobConfig, timeout_s: float = 30.0) -> str | None:
    """Stop the driver we launched (`_terminate`); returns how it stopped, None if it was not running."""
    pid = _our_process(cfg)
    if pid is None:
        return None
    how = _terminate(pid, timeout_s)
    _pid_file(cfg).unlink(missing_ok=True)
    log.info("job %s: stopped pid %d (%s)", cfg.job, pid, how)
    return how


def stop_all(state_base: Path, timeout_s: float = 30.0) -> list[str]:
    """Stop every job launched under `state_base` (<BALLAST_STATE_DIR>/jobs/<job>/driver.pid).

    What `make down` calls: by pid file only, and only a process whose argv still names its job.
    Returns one line per pid file: what was stopped and how, or why nothing was signalled."""
    said: list[str] = []
    for pid_file in sorted((state_base / "jobs").glob(f"*/{PID_FILE}")):
        job = pid_file.parent.name
        pid = launched_pid(pid_file, job)
        if pid is None:
            said.append(f"job {job}: not running (stale pid file removed)")
        else:
            said.append(f"job {job}: stopped pid {pid} and its process group ({_terminate(pid, timeout_s)})")
        pid_file.unlink(missing_ok=True)
    return said


@dataclass(frozen=True)
class Health:
    status: str  # healthy | starting | stale | missing
    message: str
    pid: int | None = None


def _outage_allowance(cfg: JobConfig, db_url: str, operator: str, pid: int | None) -> float:
    """How long the operator's driver may go without a heartbeat while it waits out an outage of
    the metrics DB or Kafka (its start records its budgets with its fencing token): a driver in
    such a wait is not dead. 0 when the driver this supervisor launched has exited: nothing waits."""
    if pid is None and _pid_file(cfg).exists():
        return 0.0
    token = store.token_row(db_url, cfg.job, operator)
    return token.outage_s if token is not None else 0.0


def check(cfg: JobConfig, db_url: str, now: datetime | None = None) -> Health:
    """Is the job alive? A fresh heartbeat from every operator says yes (a chain's loops run in one
    application: one of them stuck is the job stuck); a recent launch still starting says wait.
    Fresh = younger than `heartbeat_timeout_s` plus the outage its driver may be waiting out
    (docs/operations.md, "Heartbeat timeout and outages")."""
    now = now or datetime.now(UTC)
    beats = {name: store.heartbeat(db_url, cfg.job, name) for name in cfg.operator_names()}
    pid = _our_process(cfg)
    allow = {name: _outage_allowance(cfg, db_url, name, pid) for name in beats}

    def fresh(name: str, hb: store.HeartbeatRow | None) -> bool:
        return bool(hb and hb.status == "running"
                    and (now - hb.updated_at).total_seconds() <= cfg.heartbeat_timeout_s + allow[name])

    behind = {name: hb for name, hb in beats.items() if not fresh(name, hb)}
    if not behind:
        hb = beats[cfg.operator]
        assert hb is not None
        also = f" (and {len(beats) - 1} more operator(s) fresh)" if len(beats) > 1 else ""
        return Health("healthy", f"heartbeat {(now - hb.updated_at).total_seconds():.0f}s ago at epoch "
                                 f"{hb.last_epoch}, map v{hb.map_version}, {hb.workers} worker(s){also}", pid)
    launches = store.events(db_url, cfg.job, cfg.operator, kind="launch", limit=1)
    if launches and pid is not None and (now - launches[0].at).total_seconds() < cfg.startup_grace_s:
        if any(hb is None or hb.updated_at < launches[0].at for hb in behind.values()):
            return Health("starting", f"launched {(now - launches[0].at).total_seconds():.0f}s ago (pid {pid}); "
                                      f"start-up grace {cfg.startup_grace_s:.0f}s", pid)
    name, hb = next(iter(behind.items()))  # the first in chain order
    who = f"operator {name}: " if len(beats) > 1 else ""
    if hb is None:
        return Health("missing", f"{who}no heartbeat recorded: the job has never run", pid)
    age = (now - hb.updated_at).total_seconds()
    waits = f" + {allow[name]:.0f}s of outage waits" if allow[name] else ""
    return Health("stale", f"{who}heartbeat is {age:.0f}s old (> {cfg.heartbeat_timeout_s:.0f}s{waits}), status "
                           f"{hb.status}, last epoch {hb.last_epoch}", pid)


def supervise(cfg: JobConfig, bootstrap: str, db_url: str, security: KafkaSecurity | None = None) -> Health:
    """One health check; relaunch when missing or stale (stopping our own stuck driver first)."""
    h = check(cfg, db_url)
    if h.status in ("healthy", "starting"):
        log.info("%s: %s — %s", cfg.job, h.status, h.message)
        return h
    if h.pid is not None:
        log.warning("%s: %s; stopping our stuck driver pid %d before relaunch", cfg.job, h.message, h.pid)
        stop(cfg)
    store.add_event(db_url, cfg.job, cfg.operator, "warning" if h.status == "stale" else "info",
                   "restart" if h.status == "stale" else "start", h.message)
    pid = launch(cfg, bootstrap, db_url, h.message, security)
    return Health("starting", f"{h.message}; relaunched as pid {pid}", pid)
