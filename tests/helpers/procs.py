"""Processes and ports of the services a test starts for itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a broker, DB or Airflow of a test's own)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def killpg(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 60) -> None:
    """SIGKILL a process started with start_new_session=True and everything in its group (a
    spark-submit JVM and its Python workers die with it); reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=timeout)


def stop_group(proc: subprocess.Popen[bytes] | subprocess.Popen[str], grace_s: float = 30) -> None:
    """SIGTERM a process started with start_new_session=True and its whole group, give them
    `grace_s` to exit (children such as an api-server's workers outlive their parent's SIGTERM),
    then `killpg` whatever is left, so nothing runs on under later tests."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        proc.poll()  # reaps the leader, so a lone zombie does not keep the group alive
        time.sleep(0.2)
    killpg(proc)


def run_bench(module: str, *args: str, timeout: float = 300) -> str:
    """`python -m <module> args` from the repository root, in its own process (a bench module starts
    and stops its own local Spark); its stdout, after checking it exited 0 (else its stderr's tail)."""
    res = subprocess.run([sys.executable, "-m", module, *args], cwd=Path(__file__).resolve().parents[2],
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout
