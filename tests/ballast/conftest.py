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


@pytest.fixture
def console_client(db_url, monkeypatch):  # type: ignore[no-untyped-def]
    """The console's app in process on the test's metrics DB, its auth dependency answered (anyone
    may read; the real api-server's auth: tests/system/test_console_auth.py)."""
    from fastapi.testclient import TestClient

    from ballast import plugin

    monkeypatch.setenv("BALLAST_DB_URL", db_url)  # no ballast_metrics_db connection: the hook's fallback
    plugin._url_cache["url"] = None
    plugin.app.dependency_overrides[plugin.authorized] = lambda: None
    try:
        yield TestClient(plugin.app)
    finally:
        plugin.app.dependency_overrides.clear()
        plugin._url_cache["url"] = None
