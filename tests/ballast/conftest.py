"""Tests of single modules of the `ballast` package (plugins/ballast).

Several import Airflow or use the control-plane fixtures, so the throwaway AIRFLOW_HOME is set up
here, before any of them is collected (tests/helpers/airflow_home.py).
"""

import pytest

from ballast.config import get_job
from tests.helpers.airflow_home import airflow_db as airflow_db  # noqa: F401 - the fixtures, re-exported
from tests.helpers.airflow_home import jobs_file as jobs_file  # noqa: F401
from tests.helpers.stepapplier import seed_job


@pytest.fixture
def job(db_url, jobs_file, unique_name):  # type: ignore[no-untyped-def]
    """The control stages' job: in the jobs file and seeded in the metrics DB (15k rows/s into one
    worker that does 10k: DS2 asks for 2)."""
    jobs_file(bins=16)
    seed_job(db_url, unique_name, bins=16)
    return get_job(unique_name)
