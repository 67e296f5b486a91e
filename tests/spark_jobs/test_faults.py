"""spark_jobs.faults: a fault point kills the process the n-th time it is reached (counted per
process), removing its line first so a restarted job runs on; other lines stay; without a faults
file, and inside `paused()`, a point does nothing. Kills happen in a child process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from spark_jobs import faults
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.dataplane

# hits `after_apply` 5 times, printing a line before each (so the output says which hit killed it)
CHILD = """
from spark_jobs import faults
from tests.helpers.wait import wait_until
with faults.paused():
    faults.hit("after_apply")  # never counted
for i in range(1, 6):
    print(i, flush=True)
    faults.hit("after_apply")
print("survived", flush=True)
"""


def _child(faults_file, code: str = CHILD, **env) -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    base = {k: v for k, v in os.environ.items() if k not in ("BALLAST_FAULTS_FILE", "BALLAST_FAULTS_KILL_GROUP")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**base, "BALLAST_FAULTS_FILE": str(faults_file), **env}, start_new_session=True)


def test_the_nth_pass_kills_and_the_line_is_removed_first(tmp_path):
    f = tmp_path / "faults"
    f.write_text("before_acks 1\nafter_apply 3\nworker_mid_move 2\n")
    out = _child(f)
    assert out.returncode == -signal.SIGKILL
    lines = out.stdout.splitlines()
    assert lines[:3] == ["1", "2", "3"] and len(lines) == 4, "killed at the third counted pass"
    assert lines[3].startswith("[ballast-fault] killing pid ") and lines[3].endswith(" at after_apply")
    assert f.read_text() == "before_acks 1\nworker_mid_move 2\n", "the other points stay armed"
    again = _child(f)  # the restarted process: nothing left for this point
    assert again.returncode == 0 and again.stdout.split()[-1] == "survived"


def test_without_a_file_or_a_matching_line_nothing_happens(tmp_path):
    assert _child(tmp_path / "missing").returncode == 0
    f = tmp_path / "faults"
    f.write_text("after_apply 9\n")
    assert _child(f).returncode == 0 and f.read_text() == "after_apply 9\n"


def test_paused_points_are_not_counted(tmp_path, monkeypatch):
    f = tmp_path / "faults"
    f.write_text("worker_prepared 2\n")
    monkeypatch.setenv("BALLAST_FAULTS_FILE", str(f))
    monkeypatch.setattr(faults, "_counts", {})
    with faults.paused():
        with faults.paused():
            faults.hit("worker_prepared")
        faults.hit("worker_prepared")  # still paused: the outer pause holds
    assert faults._counts == {} and not faults._paused
    faults.hit("worker_prepared")  # the first counted pass of 2
    assert faults._counts == {"worker_prepared": 1} and f.read_text() == "worker_prepared 2\n"


def test_kill_group_takes_the_whole_process_group(tmp_path):
    """As under spark-submit: the driver's Python and its children go together."""
    f = tmp_path / "faults"
    f.write_text("before_manifest 1\n")
    code = ("import subprocess; from spark_jobs import faults\n"
            "p = subprocess.Popen(['sleep', '60']); print(p.pid, flush=True)\n"
            "faults.hit('before_manifest')\n")
    out = _child(f, code, BALLAST_FAULTS_KILL_GROUP="1")
    assert out.returncode == -signal.SIGKILL
    sleeper = int(out.stdout.split()[0])
    wait_until(lambda: _dead(sleeper), 10, f"the group's other process {sleeper} to be killed", poll=0.1)


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as st:
            return st.read().split()[2] == "Z"  # killed, not reaped yet
    except FileNotFoundError:
        return True


def test_a_stop_line_stops_the_process_there_and_a_sigcont_resumes_it(tmp_path):
    """`<point> <n> stop`: the n-th pass SIGSTOPs the process (the zombie-executor test freezes a
    Python worker mid-transaction this way), after its line is removed and with the file's lock
    released (other processes' points must not wait behind a frozen one); SIGCONT goes on."""
    import fcntl

    f = tmp_path / "faults"
    f.write_text("after_apply 2 stop\nbefore_acks 1\n")
    with _stopped_child(f) as child:
        assert f.read_text() == "before_acks 1\n", "the stop line is consumed, the others stay"
        with open(f) as fh:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the frozen process held the lock
        os.kill(child.pid, signal.SIGCONT)
        out, _ = child.communicate(timeout=30)
    assert child.returncode == 0
    lines = out.splitlines()
    assert lines[:2] == ["1", "2"] and lines[2].endswith(" at after_apply") and "stopping pid" in lines[2]
    assert lines[3:] == ["3", "4", "5", "survived"], "resumed where it stopped, and stops only once"


@contextmanager
def _stopped_child(faults_file: Path) -> Iterator[subprocess.Popen[str]]:
    """CHILD under `faults_file`, once it has stopped itself; killed on the way out if still there."""
    env = {k: v for k, v in os.environ.items() if k not in ("BALLAST_FAULTS_FILE", "BALLAST_FAULTS_KILL_GROUP")}
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env={**env, "BALLAST_FAULTS_FILE": str(faults_file)}, start_new_session=True)
    try:
        wait_until(lambda: _state(child.pid) == "T", 30, "the child to stop itself", poll=0.1)
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as st:
        raw = st.read()
    return raw[raw.rindex(")") + 2:].split()[0]


def test_a_stopped_process_stays_at_its_point_while_the_hold_file_exists(tmp_path):
    """`<file>.hold`: after the SIGCONT the process does not go past the point until the file is gone,
    so a test decides when the stopped step goes on even if the stop itself took hold late."""
    f = tmp_path / "faults"
    f.write_text("after_apply 1 stop\n")
    hold = tmp_path / "faults.hold"
    hold.touch()
    with _stopped_child(f) as child:
        os.kill(child.pid, signal.SIGCONT)
        wait_until(lambda: _state(child.pid) in "SR", 30, "the child to run again", poll=0.1)
        time.sleep(0.5)
        assert child.poll() is None, "the held child went on past its point"
        hold.unlink()
        out, _ = child.communicate(timeout=30)
    assert child.returncode == 0
    lines = out.splitlines()
    assert lines[0] == "1" and "stopping pid" in lines[1] and lines[2:] == ["2", "3", "4", "5", "survived"]
