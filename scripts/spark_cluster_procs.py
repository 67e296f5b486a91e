"""The processes of a loopback Spark standalone cluster, found and signalled by pid, never by name.

Linux only: reads /proc. Every process of one cluster (executors and their Python workers
included) carries TAG_VAR=<token> in its environment, which is how stragglers are found.
Polling (`wait_until`) and free ports live here too: every start-up wait is on a process.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
TAG_VAR = "BALLAST_SPARK_CLUSTER"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    """Poll `check` until it returns something truthy (returned); TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout:.0f}s")
        time.sleep(interval)


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def stat(pid: int) -> tuple[int, int, str] | None:
    """(ppid, pgid, state) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    parts = raw[raw.rindex(")") + 2:].split()
    return int(parts[1]), int(parts[2]), parts[0]


def pid_alive(pid: int) -> bool:
    st = stat(pid)
    return st is not None and st[2] not in ("Z", "X")


def cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        st = stat(pid)
        if st is not None:
            children.setdefault(st[0], []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def has_tag(pid: int, token: str) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{TAG_VAR}={token}".encode() in env.split(b"\0")


def arg(cmd: list[str], flag: str) -> str | None:
    return cmd[cmd.index(flag) + 1] if flag in cmd[:-1] else None


def signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # every process here leads its own group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass
