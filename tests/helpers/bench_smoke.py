"""The benchmark smoke run (`python -m bench.run --smoke`), started when the session starts.

Why in the background: the smoke takes ~20 minutes, mostly waiting on Spark and Kafka, and the
rest of the suite leaves about two thirds of a 2-core machine idle too. Started with the first
test and collected by the smoke tests (which the session orders last), the two overlap instead of
adding up. Its own topics, ports and result dir keep it apart from every other test; its figures
are asserted as shapes and counts, never as absolute times, so sharing the machine does not
change what passes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


class BackgroundSmoke:
    """One `bench.run --smoke` subprocess: start it, later wait for it and get its result dir."""

    def __init__(self, results: Path, log_dir: Path) -> None:
        self.run_id = f"pytest-smoke-{uuid.uuid4().hex[:6]}"
        self.run_dir = results / self.run_id
        self.log = log_dir / f"{self.run_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> None:
        with open(self.log, "wb") as out:  # a file, not a pipe: a full pipe would stall the run
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.run", "--smoke", "--run-id", self.run_id],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.started_at = time.monotonic()

    def wait(self, timeout: float) -> Path:
        """Block until the run ends (at most `timeout` s after it started); its result dir, or an
        AssertionError that carries the end of its log."""
        assert self.proc is not None, "the smoke run was never started"
        left = max(1.0, timeout - (time.monotonic() - self.started_at))
        try:
            rc = self.proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"bench.run --smoke still running after {timeout:.0f} s\n{self._tail()}") from None
        assert (self.run_dir / "summary.json").exists(), f"no summary.json\n{self._tail()}"
        assert rc == 0, f"bench.run --smoke failed (exit {rc})\n{self._tail()}"
        return self.run_dir

    def stop(self) -> None:
        """End the run and everything it started (its process group), if it is still going."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 60.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def _tail(self, chars: int = 8000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no log at {self.log})"
