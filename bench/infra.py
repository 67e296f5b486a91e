"""Plumbing shared by the experiments: the broker, topics, background processes, the metrics DB."""

from __future__ import annotations

import importlib.util
import os
import platform
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable


def stack():  # type: ignore[no-untyped-def]
    """scripts/stack.py as a module (it is a script, not a package)."""
    if "ballast_stack" in sys.modules:
        return sys.modules["ballast_stack"]
    spec = importlib.util.spec_from_file_location("ballast_stack", REPO / "scripts" / "stack.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["ballast_stack"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def kafka_up() -> str:
    """The harness's broker in PLAINTEXT (its clients carry no credentials): an explicit opt-out of
    the stack's secure default, under .state/bench on 127.0.0.1:29092 unless the caller chose a state
    dir and ports; it stays up after the run (stop it with the same BALLAST_STATE_DIR and
    `scripts/stack.py down`)."""
    os.environ["BALLAST_KAFKA_AUTH"] = "none"
    # its own state dir and ports, apart from a secure `make up`/`make demo` stack (a caller's win,
    # e.g. the test session's, which starts the smoke run with its own)
    os.environ.setdefault("BALLAST_STATE_DIR", str(REPO / ".state" / "bench"))
    os.environ.setdefault("BALLAST_KAFKA_PORT", "29092")
    os.environ.setdefault("BALLAST_KAFKA_CONTROLLER_PORT", "29093")
    st = stack()
    st.kafka_up()
    return st.kafka_bootstrap()


def ensure_topics(topics: dict[str, int], bootstrap: str) -> None:
    stack().ensure_topics(topics, bootstrap)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.setdefault("PYSPARK_PYTHON", PY)
    # the repo root for bench/ itself (a harness, not installed); ballast, spark_jobs and
    # migrations_db come from the editable install
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), e.get("PYTHONPATH", "")])
    e.setdefault("BALLAST_LOG_LEVEL", "INFO")
    return e


class Proc:
    """A child process with its output in a log file; `stop()` sends SIGTERM, then SIGKILL."""

    def __init__(self, args: list[str], log: Path, name: str, extra_env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.name = args, log, name
        self.extra_env = extra_env or {}
        self.p: subprocess.Popen[bytes] | None = None

    def start(self) -> Proc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.log, "ab")
        self.p = subprocess.Popen(self.args, stdout=fh, stderr=subprocess.STDOUT, env={**env(), **self.extra_env},
                                  cwd=str(REPO),
                                  start_new_session=True)
        fh.close()
        return self

    @property
    def pid(self) -> int:
        assert self.p is not None
        return self.p.pid

    def alive(self) -> bool:
        return self.p is not None and self.p.poll() is None

    def wait(self, timeout: float | None = None) -> int:
        assert self.p is not None
        return self.p.wait(timeout=timeout)

    def stop(self, timeout: float = 120.0) -> int | None:
        if self.p is None or self.p.poll() is not None:
            return self.p.returncode if self.p else None
        self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)  # our own session: only this child's tree
            return self.p.wait(timeout=30)

    def kill(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait(timeout=30)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except FileNotFoundError:
            return ""


def wait_until(pred, timeout: float, what: str, poll: float = 0.25, proc: Proc | None = None):  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited (rc={proc.p.returncode if proc.p else None}) while waiting for "
                               f"{what}; log {proc.log}:\n{proc.tail()}")
        time.sleep(poll)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}"
                       + (f"; log {proc.log}:\n{proc.tail()}" if proc else ""))


def utc(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def unix(ts: datetime | None) -> float:
    return utc(ts).timestamp() if ts is not None else float("nan")  # type: ignore[union-attr]


def machine_info() -> dict[str, Any]:
    import psutil

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        lines = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30).stderr.splitlines()
        # the first line may be the launcher's "Picked up JDK_JAVA_OPTIONS" note (the test suite sets it)
        java = next((x for x in lines if " version " in x), lines[0] if lines else "unknown")
    except Exception as exc:  # noqa: BLE001
        java = f"unknown ({exc})"
    import pyspark

    load1, load5, load15 = os.getloadavg()
    return {
        "cores": os.cpu_count(), "ram_gb": round(psutil.virtual_memory().total / 2**30, 1), "cpu_model": cpu,
        "python": platform.python_version(), "java": java, "spark": pyspark.__version__,
        "os": platform.platform(), "loadavg_at_start": [round(load1, 2), round(load5, 2), round(load15, 2)],
        "jvm_options": os.environ.get("JDK_JAVA_OPTIONS", ""),  # e.g. the test suite's C1-only JIT
    }


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "spark_jobs", "plugins", "bench"], cwd=REPO,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return out.stdout.strip() + ("+dirty" if dirty else "")
    except Exception:  # noqa: BLE001
        return "unknown"
