"""The benchmark smoke run (`python -m bench.run --smoke`), started when the session starts.

Why in the background: the smoke takes ~14 minutes (17 before its smoke-only windows were shortened),
mostly waiting on Spark and Kafka, and the
rest of the suite leaves much of a 2-core machine idle too. Started with the session and collected
by the smoke tests (which the session orders last), the two overlap instead of adding up. Its own
topics, ports and result dir keep it apart from every other test; its figures are asserted as
shapes and counts, never as absolute times, so sharing the machine does not change what passes.

Under pytest-xdist the controller starts the run (tests/conftest.py) and the worker that gets the
smoke tests waits for it: so the run's end is a file (its exit code) that any process can wait on,
not only the parent that could `wait()` for its child.

BALLAST_BENCH_SMOKE_DIR=bench/results/<run-id> points the smoke tests at a finished run instead
(FinishedSmoke): nothing is started, its summary and files are checked as they are.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# a finished smoke's result dir (bench/results/<run-id>): the smoke tests check it instead of starting a run
EXISTING_ENV = "BALLAST_BENCH_SMOKE_DIR"

# How much lower the smoke's CPU priority is than the tests' (`nice`; its jobs and JVMs inherit it).
# Process accounting over a fresh clone's run (docs/suite.md, "Where the idle CPU is") had the CPU idle
# 25 % of the run while the smoke took a core from the tests in its first minutes: niced, it runs on
# what the tests leave idle instead of slowing them, and its checks are shapes and counts, not times.
NICE = 10
# runs the smoke (niced by argv[1]) and writes its exit code to argv[2] when it ends, whoever its parent is
_WRAPPER = ("import os, subprocess, sys; os.nice(int(sys.argv[1])); rc = subprocess.call(sys.argv[3:]); "
            "open(sys.argv[2], 'w').write(str(rc)); sys.exit(rc)")


@dataclass(frozen=True)
class SmokeRun:
    """Where one smoke run writes: its result dir, its log, its exit-code file; and when it started
    (wall clock, so that a process other than the starter can compute its deadline)."""

    run_id: str
    run_dir: str
    log: str
    rc_file: str
    started_at: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


class BackgroundSmoke:
    """One `bench.run --smoke` subprocess: start it (one process), wait for it (any process)."""

    def __init__(self, results: Path, log_dir: Path, run: SmokeRun | None = None) -> None:
        if run is None:
            run_id = f"pytest-smoke-{uuid.uuid4().hex[:6]}"
            run = SmokeRun(run_id, str(results / run_id), str(log_dir / f"{run_id}.log"),
                           str(log_dir / f"{run_id}.rc"))
        self.run = run
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def run_dir(self) -> Path:
        return Path(self.run.run_dir)

    def start(self) -> None:
        Path(self.run.rc_file).unlink(missing_ok=True)
        with open(self.run.log, "wb") as out:  # a file, not a pipe: a full pipe would stall the run
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WRAPPER, str(NICE), self.run.rc_file,
                 sys.executable, "-m", "bench.run", "--smoke", "--run-id", self.run.run_id],
                cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.run = SmokeRun(**{**self.run.as_dict(), "started_at": time.time()})  # type: ignore[arg-type]

    def wait(self, timeout: float) -> Path:
        """Block until the run ends (at most `timeout` s after it started); its result dir, or an
        AssertionError that carries the end of its log."""
        assert self.run.started_at, "the smoke run was never started"
        rc_file = Path(self.run.rc_file)
        deadline = self.run.started_at + timeout
        while not rc_file.exists():
            if time.time() > deadline:
                self.stop()
                raise AssertionError(f"bench.run --smoke still running after {timeout:.0f} s\n{self._tail()}")
            time.sleep(2.0)
        rc = int(rc_file.read_text().strip() or "1")
        assert (self.run_dir / "summary.json").exists(), f"no summary.json\n{self._tail()}"
        assert rc == 0, f"bench.run --smoke failed (exit {rc})\n{self._tail()}"
        return self.run_dir

    def stop(self) -> None:
        """End the run and everything it started (its process group), if this process started it
        and it is still going."""
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
            return Path(self.run.log).read_text(errors="replace")[-chars:]
        except OSError:
            return f"(no log at {self.run.log})"


class FinishedSmoke(BackgroundSmoke):
    """An earlier smoke run's result dir (`BALLAST_BENCH_SMOKE_DIR=bench/results/<run-id> pytest
    tests/bench/test_smoke.py`): checked as it is, nothing is started or stopped."""

    def __init__(self, run_dir: Path) -> None:
        run_dir = run_dir.resolve()
        super().__init__(run_dir.parent, run_dir.parent,
                         SmokeRun(run_dir.name, str(run_dir), str(run_dir / "run.log"), "", time.time()))

    def start(self) -> None:
        pass

    def wait(self, timeout: float) -> Path:
        assert (self.run_dir / "summary.json").exists(), f"no summary.json in {self.run_dir}"
        return self.run_dir


def existing_run() -> FinishedSmoke | None:
    """The finished run named by BALLAST_BENCH_SMOKE_DIR, if set."""
    d = os.environ.get(EXISTING_ENV)
    return FinishedSmoke(Path(d)) if d else None
