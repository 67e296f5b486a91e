"""Shared fixtures: the real services every integration test runs against.

The broker is started by the test session itself (scripts/stack.py) and a test that needs it
fails — never skips — when it cannot come up. Each test gets its own topics and its own migrated
SQLite metrics DB, so tests never see each other's data.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def _load_stack():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ballast_stack", REPO / "scripts" / "stack.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["ballast_stack"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


stack = _load_stack()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """A running local KRaft broker; fails the test if it cannot start.

    A broker this session started is stopped at its end (by its pid file); one that was already
    running (`make up`, another session) is left as it was."""
    started = not stack.default_broker().alive()
    try:
        stack.kafka_up()
    except stack.StackError as exc:
        pytest.fail(f"Kafka broker could not be started: {exc}")
    yield stack.kafka_bootstrap()
    if started:
        stack.kafka_down()


SMOKE_FIXTURE = "smoke_run"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmark smoke's tests go last: its run starts with the session (below) and overlaps
    everything before them."""
    items.sort(key=lambda item: SMOKE_FIXTURE in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session", autouse=True)
def bench_smoke(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Starts `bench.run --smoke` in the background when any selected test reads its result (see
    tests/helpers/bench_smoke.py for why); stops it if the session ends first."""
    if not any(SMOKE_FIXTURE in getattr(i, "fixturenames", ()) for i in request.session.items):
        yield None
        return
    from bench.run import RESULTS
    from tests.helpers.bench_smoke import BackgroundSmoke

    request.getfixturevalue("kafka_bootstrap")
    smoke = BackgroundSmoke(RESULTS, tmp_path_factory.mktemp("bench-smoke"))
    smoke.start()
    yield smoke
    smoke.stop()


@pytest.fixture(scope="session")
def postgres_base_url() -> Iterator[str]:
    """The stack's throwaway PostgreSQL cluster (Debian's postgresql installed when absent).

    Stopped at the end of the session when this session started it."""
    started = not stack.default_postgres().alive()
    try:
        stack.postgres_up()
    except stack.StackError as exc:
        pytest.fail(f"PostgreSQL could not be installed or started here: {exc}")
    yield stack.postgres_url()
    if started:
        stack.postgres_down()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short name unique to this test run, for jobs and topics."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:30].strip("-")
    return f"t-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def make_topics(kafka_bootstrap: str):  # type: ignore[no-untyped-def]
    def _make(topics: dict[str, int]) -> None:
        stack.ensure_topics(topics, kafka_bootstrap)

    return _make


@pytest.fixture(scope="session")
def spark():  # type: ignore[no-untyped-def]
    """One local[2] SparkSession with the Kafka connector for the whole test session."""
    from spark_jobs.session import build_spark

    session = build_spark("ballast-tests")
    yield session
    session.stop()
    # py4j closes leftover connections from __del__ at interpreter exit, after pytest has closed
    # the captured streams: its INFO line then prints a "Logging error" traceback
    logging.getLogger("py4j").setLevel(logging.WARNING)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh, migrated SQLite metrics DB for one test."""
    from migrations_db.db import migrate

    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    migrate(url)
    return url
