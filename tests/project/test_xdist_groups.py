"""`make test`'s xdist flags with tests.helpers.xdist_groups: every test on a grouped fixture runs on
one worker, and the other tests still spread over both. A real pytest with 2 xdist workers on a
scratch suite whose fixtures carry the grouped names; it fails if the marks stop reaching xdist
(a hook that runs after xdist's, or pytest-dev/pytest-xdist#1386 under pytest 9.2)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.helpers.xdist_groups import GROUPS

REPO = Path(__file__).resolve().parents[2]

CONFTEST = '''
import os
import pytest

def _record(request):
    with open(os.environ["WHERE_FILE"], "a") as f:
        f.write(f"{request.node.name} {os.environ.get('PYTEST_XDIST_WORKER', '-')}\\n")

@pytest.fixture
def where(request):
    _record(request)
''' + "".join(f'''
@pytest.fixture
def {fixture}(where):
    return None
''' for fixture in GROUPS)


def _make_test_flags() -> list[str]:
    """The xdist flags of the Makefile's `test` target (its pytest line)."""
    recipe = (REPO / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    flags = re.findall(r"--dist \S+|--no-loadscope-reorder", recipe)
    assert "--dist loadgroup" in flags and "--no-loadscope-reorder" in flags, recipe
    return [part for flag in flags for part in flag.split()]


def test_make_tests_xdist_flags_keep_each_group_on_one_worker(tmp_path: Path) -> None:
    tests = ["import time", ""]
    for fixture in GROUPS:
        tests += [f"def test_{fixture}_{i}({fixture}):\n    time.sleep(0.2)\n" for i in range(3)]
    tests += [f"def test_plain_{i}(where):\n    time.sleep(0.2)\n" for i in range(8)]
    (tmp_path / "test_scratch.py").write_text("\n".join(tests))
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    where = tmp_path / "where.txt"
    env = {**os.environ, "WHERE_FILE": str(where), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", *_make_test_flags(), "-p",
                          "tests.helpers.xdist_groups", "-p", "no:cacheprovider", str(tmp_path)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    workers: dict[str, set[str]] = defaultdict(set)
    for line in where.read_text().splitlines():
        name, worker = line.split()
        workers[name.rsplit("_", 1)[0]].add(worker)
    for fixture in GROUPS:
        assert len(workers[f"test_{fixture}"]) == 1, f"{fixture}'s tests ran on {sorted(workers[f'test_{fixture}'])}"
    assert workers["test_plain"] == {"gw0", "gw1"}, "the scratch suite did not spread: the check above proves nothing"
