"""scripts/spark_cluster_cli.py: `status` and `down` of a directory with no recorded cluster say so
and exit 1, touching nothing; a bad action is exit 2. (`up` starts real JVMs: the cluster itself
is tested in test_spark_cluster.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "scripts" / "spark_cluster_cli.py"


@pytest.mark.parametrize("action", ["status", "down"])
def test_no_recorded_cluster_is_exit_1_with_where_it_looked(tmp_path, action):
    out = subprocess.run([sys.executable, str(CLI), action, "--dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and f"no cluster recorded in {tmp_path / 'cluster.json'}" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_action_is_exit_2(tmp_path):
    out = subprocess.run([sys.executable, str(CLI), "start", "--dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "invalid choice: 'start'" in out.stderr
