"""Processes and ports of the services a test starts for itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess


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
