"""The DAG folder parsed as the scheduler parses it (a DagBag), for a jobs file of the test's own,
without Airflow's metadata DB: the DAGs' structure, params and task arguments are checked without
running anything (running them: tests/dags/test_dags_run.py). Import tests/helpers/airflow_home.py
first (every tests/dags test does, through its conftest.py)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

#: two jobs: a one-operator job with its own rebalance knobs, and a chain of two operators
JOBS = """
schedules: {supervise: "*/3 * * * *", rebalance: "*/7 * * * *"}
jobs:
  - {job: clicks, operator: keycount, input_topic: clicks, max_workers: 4,
     rebalance: {poll_interval_s: 0.5}}
  - job: orders
    input_topic: orders
    operators:
      - {name: split, operator: wordcount}
      - {name: counts, operator: keycount}
"""


def dag_bag(tmp_dir: Path, jobs: str = JOBS) -> Any:
    """A DagBag of dags/ for `jobs` (the DAGs are built when the folder is parsed)."""
    from airflow.dag_processing.dagbag import DagBag

    path = tmp_dir / "jobs.yaml"
    path.write_text(jobs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BALLAST_JOBS_FILE", str(path))
        bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag


def run_params(dag: Any, conf: dict[str, Any]) -> dict[str, Any]:
    """The params a run triggered with `conf` gets, validated as Airflow validates them before it
    creates the run (ParamValidationError when a value breaks its schema)."""
    params = copy.deepcopy(dag.params)
    params.update(conf)
    return params.validate()  # type: ignore[no-any-return]


def edges(dag: Any) -> set[tuple[str, str]]:
    """(upstream, downstream) task ids of every dependency."""
    return {(t.task_id, d) for t in dag.tasks for d in t.downstream_task_ids}


def rebalance_dag(cfg: Any, name: str = "rebalance_under_test") -> Any:
    """`dags/ballast_rebalance.py`'s DAG for one job (`make_dag(cfg, None)`: no schedule), loaded from
    its file as the scheduler would, for a test that runs it with `dag.test()`."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "dags" / "ballast_rebalance.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.make_dag(cfg, None)
