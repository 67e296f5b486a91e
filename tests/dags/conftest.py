"""Tests of the DAGs in dags/ under `dag.test()`: the throwaway AIRFLOW_HOME is set up here, before
Airflow is imported (tests/helpers/airflow_home.py)."""

from tests.helpers.airflow_home import airflow_db as airflow_db  # noqa: F401 - the fixtures, re-exported
from tests.helpers.airflow_home import jobs_file as jobs_file  # noqa: F401
