"""Tests of the DAGs in dags/ under `dag.test()`: the throwaway AIRFLOW_HOME is set up here, before
Airflow is imported (tests/helpers/airflow_home.py)."""

from pathlib import Path

import pytest

from tests.helpers.airflow_home import airflow_db as airflow_db  # noqa: F401 - the fixtures, re-exported
from tests.helpers.airflow_home import jobs_file as jobs_file  # noqa: F401

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The DAG tests time out by a watchdog thread, not SIGALRM: Airflow's DAG-file import arms and
    then clears the process's one real-time alarm and takes over its handler
    (airflow.dag_processing.importers.python_importer; task execution timeouts do the same), which
    cancels pytest-timeout's, so a `dag.test()` that never ends hung a CI run for 48 minutes instead
    of failing its test. A test's own `timeout` mark keeps its value."""
    for item in items:
        if _HERE in item.path.parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(900, method="thread"))
