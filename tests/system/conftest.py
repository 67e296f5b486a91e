"""Fixtures of the system tests: end-to-end runs across packages on the real services.

These were grouped by area before (dataplane, controlplane, cluster, faults, nexmark, security,
ui); each file's own `pytestmark` still names its area. The oracles and shared helpers are in
tests/helpers (dp_helpers, kill_runs, window_helpers, fault_helpers, fuzz_messages,
console_stack); the user operators that Spark loads by module name (chain_ops, reminder_processor,
poison_operator) sit beside the tests that ship them.

The throwaway AIRFLOW_HOME (tests/helpers/airflow_home.py) is set up here, before any test module
imports Airflow; the loopback Spark cluster's fixtures come from tests/helpers/cluster.py.
"""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import stop_after_last_use
from tests.helpers import console_stack as cs
from tests.helpers.airflow_home import airflow_db as airflow_db  # noqa: F401 - the fixtures, re-exported
from tests.helpers.airflow_home import jobs_file as jobs_file  # noqa: F401
from tests.helpers.cluster import spark_cluster as spark_cluster  # noqa: F401
from tests.helpers.cluster import submit_app as submit_app  # noqa: F401


@pytest.fixture
def produce_with_spark(spark, kafka_bootstrap):  # type: ignore[no-untyped-def]
    """Write many (key, value) records fast through Spark's Kafka writer (kafka-python is slow at 200k)."""

    def _produce(topic: str, keys: list[bytes], values: list[bytes] | None = None) -> None:
        rows = [(k, values[i] if values else b"1") for i, k in enumerate(keys)]
        df = spark.createDataFrame(rows, "key binary, value binary")
        df.write.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap).option("topic", topic).save()

    return _produce


@pytest.fixture(scope="session")
def console_stack(request, tmp_path_factory, kafka_bootstrap):  # type: ignore[no-untyped-def]
    """Airflow standalone started by scripts/stack.py for these tests; stopped after the last test
    that uses it (tests/conftest.py `stop_after_last_use`), else at the session's end."""
    try:
        st = cs.start(tmp_path_factory.mktemp("console"), f"ui{uuid.uuid4().hex[:6]}", 16, kafka_bootstrap)
    except Exception as exc:  # noqa: BLE001 - the message says what failed
        pytest.fail(f"the stack's Airflow did not come up: {exc}")
    stop = stop_after_last_use(request.config, "console_stack", lambda: cs.stop(st))
    try:
        yield st
    finally:
        stop()


@pytest.fixture
def browser():  # type: ignore[no-untyped-def]
    """Headless Debian chromium through Selenium (installed with apt-get when absent)."""
    try:
        drv = cs.browser()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"no browser: {exc}")
    try:
        yield drv
    finally:
        drv.quit()
