"""scripts/leftovers.py: what a test run started and left running is named, killed, and fails the run."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(tag: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "scripts/leftovers.py", "--tag", tag, "--grace", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_a_process_left_by_the_run_is_named_killed_and_fails_it():
    tag = uuid.uuid4().hex
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, "BALLAST_RUN_TAG": "another-run"})
    left = subprocess.Popen(["sleep", "301"], env={**os.environ, "BALLAST_RUN_TAG": tag}, start_new_session=True)
    try:
        res = _run(tag)
        assert res.returncode == 1, res.stdout + res.stderr
        assert f"pid {left.pid}: sleep 301" in res.stdout and "1 process(es)" in res.stdout
        assert left.wait(timeout=10) == -9  # killed
        assert other.poll() is None  # another run's: left alone
        again = _run(tag)
        assert again.returncode == 0 and "nothing the test run started still runs" in again.stdout
    finally:
        for p in (other, left):
            p.kill()
            p.wait()
