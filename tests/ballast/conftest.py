"""Tests of single modules of the `ballast` package (plugins/ballast).

Several import Airflow or use the control-plane fixtures, so the throwaway AIRFLOW_HOME is set up
here, before any of them is collected (tests/helpers/airflow_home.py).
"""

from tests.helpers.airflow_home import airflow_db as airflow_db  # noqa: F401 - the fixtures, re-exported
from tests.helpers.airflow_home import jobs_file as jobs_file  # noqa: F401
