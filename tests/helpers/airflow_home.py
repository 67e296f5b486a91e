"""Control-plane fixtures: a throwaway AIRFLOW_HOME (set before airflow is imported) and a jobs file.

`airflow db migrate` runs once per session in that home, so `dag.test()` works under pytest
without touching the developer's Airflow (.state/airflow).

Importing this module sets the environment, so every directory whose tests import Airflow (or the
Ballast modules that do) imports it from its conftest.py — tests/ballast, tests/dags and
tests/system — before any test module is collected; Python runs the module once, so they all share
one home.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.helpers.jobs import write_jobs_file

REPO = Path(__file__).resolve().parents[2]
_HOME = Path(tempfile.mkdtemp(prefix="ballast-airflow-home-"))
os.environ["AIRFLOW_HOME"] = str(_HOME)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(REPO / "dags")
os.environ["AIRFLOW__CORE__PLUGINS_FOLDER"] = str(REPO / "plugins")
os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "True")
if "airflow" in sys.modules:  # pragma: no cover - a guard, not a code path
    raise RuntimeError("airflow was imported before tests/helpers/airflow_home.py set AIRFLOW_HOME")


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """Airflow's metadata DB in the throwaway home, migrated once."""
    airflow = str(Path(sys.executable).parent / "airflow")
    res = subprocess.run([airflow, "db", "migrate"], env=os.environ.copy(), capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, f"airflow db migrate failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return _HOME


@pytest.fixture
def jobs_file(tmp_path: Path, unique_name: str, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A jobs file with one job named after the test; returns a writer to change bins/timeout."""

    def write(bins: int = 16, timeout: float = 60.0) -> Path:
        p = write_jobs_file(tmp_path / "ballast_jobs.yaml", unique_name, bins, max_workers=4,
                            rebalance={"await_timeout_s": timeout, "poll_interval_s": 0.2})
        monkeypatch.setenv("BALLAST_JOBS_FILE", str(p))
        return p

    return write
