"""What every service of the local stack shares: its addresses and dirs, pid files, start-up waits.

The service modules (stack_kafka, stack_airflow, stack_postgres) each hold one service and build
on these; scripts/stack.py is the CLI that wires them. A service is a process group started
here, known by its pid file, and stopped by that pid only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ballast.errors import BallastError
from ballast.options import settings

REPO = Path(__file__).resolve().parent.parent
_OPTS = settings()
STATE = _OPTS.state_dir
CACHE = _OPTS.cache_dir
HOST = "127.0.0.1"
KAFKA_PORT = _OPTS.kafka_port
KAFKA_CONTROLLER_PORT = _OPTS.kafka_controller_port
AIRFLOW_PORT = _OPTS.airflow_port
PG_PORT = _OPTS.pg_port
ADMIN_USER, ADMIN_PASSWORD = "admin", _OPTS.airflow_password


class StackError(BallastError, RuntimeError):
    """A service could not be brought up; the message says what to do."""


def log(msg: str) -> None:
    print(f"[ballast-stack] {msg}", flush=True)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for services and tests on their own ports)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def pid_alive(pidfile: Path) -> int | None:
    """The pid in `pidfile` when that process still runs (a reaped child counts as gone)."""
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    try:  # started by this very process (tests): an exited child is a zombie until reaped
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    except ChildProcessError:  # not our child (`make up` ran in another process): kill(0) said enough
        pass
    return pid


def spawn(cmd: list[str], logfile: Path, pidfile: Path, env: dict[str, str] | None = None) -> int:
    """Start `cmd` in its own process group, output to `logfile`, its pid into `pidfile`."""
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env or os.environ.copy(), start_new_session=True, cwd=REPO,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def stop(name: str, pidfile: Path, timeout: float = 30.0, sig: int = signal.SIGTERM) -> None:
    """Signal the process group of `pidfile`'s pid, SIGKILL it after `timeout`; remove the pid file."""
    pid = pid_alive(pidfile)
    if pid is None:
        log(f"{name}: not running")
        pidfile.unlink(missing_ok=True)
        return
    os.killpg(pid, sig)
    deadline = time.time() + timeout
    while time.time() < deadline and pid_alive(pidfile):
        time.sleep(0.3)
    if pid_alive(pidfile):
        log(f"{name}: did not stop in {timeout:.0f}s, killing")
        os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    log(f"{name}: stopped")


def wait_healthy(check: Callable[[], bool], what: str, timeout: float, logfile: Path, pidfile: Path) -> None:
    """Poll `check` until true; a StackError with the log's tail when the process dies or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        if not pid_alive(pidfile):
            tail = logfile.read_text(errors="replace")[-3000:] if logfile.exists() else ""
            raise StackError(f"{what} exited during start-up; last log lines ({logfile}):\n{tail}")
        time.sleep(0.5)
    raise StackError(f"{what} did not become healthy within {timeout:.0f}s; see {logfile}")


def need_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("Java is missing: install a JDK 17+ (Debian: apt-get install -y openjdk-17-jre-headless)")
    return java
