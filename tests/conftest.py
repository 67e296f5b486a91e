"""Shared fixtures: the real services every integration test runs against.

The broker is started by the test session itself (scripts/stack.py) and a test that needs it
fails — never skips — when it cannot come up. Each test gets its own topics and its own migrated
SQLite metrics DB, so tests never see each other's data.
"""

from __future__ import annotations

import fcntl
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
# the stack is secure by default (SASL/SCRAM + ACLs, signed control messages: scripts/stack_kafka.py,
# stack_secrets.py); the suite's shared broker and any Airflow it starts opt out explicitly, as its
# clients are plaintext and unsigned. Tests of the secure configuration start their own broker
# (tests/helpers/brokers.py) and keys (tests/system/test_kafka_auth.py, tests/scripts/test_stack_secure.py).
os.environ["BALLAST_KAFKA_AUTH"] = "none"
os.environ["BALLAST_CONTROL_SIGNING"] = "none"
# ...and its services live apart from the developer's stack: `make demo` leaves a secure broker on
# 9092 with its data under .state/kafka, and `make test` right after must neither reuse that broker
# (its clients are plaintext) nor reformat its data. A caller that names a state dir or ports keeps them.
os.environ.setdefault("BALLAST_STATE_DIR", str(REPO / ".state" / "test-session"))
os.environ.setdefault("BALLAST_KAFKA_PORT", "19092")
os.environ.setdefault("BALLAST_KAFKA_CONTROLLER_PORT", "19093")
os.environ.setdefault("BALLAST_PG_PORT", "19432")
# Every short JVM the suite starts (Spark drivers and executors, spark-submit's launcher, Kafka's tools)
# runs C1-only with the serial collector; a Kafka broker pins the JDK's defaults (scripts/stack_kafka.py).
# Why: on 2 cores the suite is CPU-bound, and C2's compiler threads and G1's concurrent threads are a
# large share of a JVM that lives a minute (tests/system/test_exactly_once.py: 325 -> 215 CPU s and
# 193 -> 159 s wall; a driver's start-up to a first SQL result 12 -> 6.6 CPU s). Steady-state speed is
# what C2 buys, and no check times it. Jobs and benchmarks outside the suite keep the JDK's defaults;
# a caller's own JDK_JAVA_OPTIONS wins.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
os.environ.setdefault("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS)


def _load_stack():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("ballast_stack", REPO / "scripts" / "stack.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["ballast_stack"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


stack = _load_stack()


@contextmanager
def _exclusive(service: str) -> Iterator[None]:
    """One test process at a time checks and starts a shared service (pytest-xdist workers race)."""
    stack.STATE.mkdir(parents=True, exist_ok=True)
    with open(stack.STATE / f"{service}.test-lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def _owned_mark(service: str) -> Path:
    """Marks a shared service a test worker started: the xdist controller stops it at the end (a
    worker cannot, as other workers may still use it)."""
    return stack.STATE / f"{service}.test-session-owned"


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _is_controller(config: pytest.Config) -> bool:
    return not _is_worker(config) and getattr(config.option, "dist", "no") != "no" \
        and bool(getattr(config.option, "tx", None))


def _shared_service(config: pytest.Config, service: str, alive: Callable[[], bool], up: Callable[[], None],
                    down: Callable[[], None]) -> Iterator[None]:
    """Start `service` unless it runs; stop it at the end when this session started it. Under
    xdist the first worker starts it and the controller stops it (pytest_unconfigure)."""
    worker = _is_worker(config)
    with _exclusive(service):
        started = not alive()
        up()
        if started and worker:
            _owned_mark(service).touch()
    yield
    if started and not worker:
        down()


@pytest.fixture(scope="session")
def kafka_bootstrap(request: pytest.FixtureRequest) -> Iterator[str]:
    """A running local KRaft broker; fails the test if it cannot start.

    A broker this session started is stopped at its end (by its pid file); one that was already
    running (`make up`, another session) is left as it was."""
    svc = _start(_shared_service(request.config, "kafka", lambda: stack.default_broker().alive(),
                                 stack.kafka_up, stack.kafka_down), "Kafka broker could not be started")
    yield stack.kafka_bootstrap()
    next(svc, None)


_EARLY_STOPS = pytest.StashKey[dict[str, Callable[[], None]]]()


def stop_after_last_use(config: pytest.Config, fixture: str, stop: Callable[[], None]) -> Callable[[], None]:
    """Registers `stop` of a session fixture's service to run after the last test that uses the
    fixture instead of at the session's end. Why: a service kept until the end runs under every
    later test — Airflow's scheduler, triggerer and DAG processor take a share of a 2-core machine
    for the rest of the suite. In one process, or on an xdist worker when the fixture is grouped
    (tests.helpers.xdist_groups: every test on it runs on that worker, in collection order); a worker
    does not know which other tests it gets next. Returns the idempotent stop for the fixture's own
    teardown."""
    done: list[bool] = []

    def once() -> None:
        if not done:
            done.append(True)
            stop()

    # imported here, not at the top: pytest_plugins imports it first, so that its asserts are rewritten
    from tests.helpers.xdist_groups import GROUPS

    if not _is_worker(config) or fixture in GROUPS:
        config.stash.setdefault(_EARLY_STOPS, {})[fixture] = once
    return once


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Runs the early stops (above) of fixtures no later test of the session uses."""
    stops = item.config.stash.get(_EARLY_STOPS, {})
    for fixture in [f for f in stops if f in getattr(item, "fixturenames", ())]:
        items = item.session.items
        later = items[items.index(item) + 1:] if item in items else []
        if not any(fixture in getattr(i, "fixturenames", ()) for i in later):
            stops.pop(fixture)()


def _start(svc: Iterator[None], failure: str) -> Iterator[None]:
    """Runs a `_shared_service` up to its yield; a service that cannot start fails the test."""
    try:
        next(svc)
    except stack.StackError as exc:
        pytest.fail(f"{failure}: {exc}")
    return svc


SMOKE_FIXTURE = "smoke_run"
SMOKE_TESTS = "tests/bench/test_smoke.py::"  # what the xdist controller sees of them: node ids
# tests that share an expensive fixture run on one xdist worker (one Airflow, one cluster at a time)
pytest_plugins = ["tests.helpers.xdist_groups"]
# a test on any of these needs a running service (or Spark): `make test-fast` leaves it out
SERVICE_FIXTURES = frozenset({"kafka_bootstrap", "make_topics", "spark", "produce_with_spark", "postgres_base_url",
                              "airflow_db", "console_stack", "browser", "spark_cluster", "submit_app", "s3_server",
                              SMOKE_FIXTURE})
_SMOKE = pytest.StashKey[Any]()  # the controller's tests.helpers.bench_smoke.BackgroundSmoke


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The benchmark smoke's tests go last: its run starts with the session (below) and overlaps
    everything before them. A test on a service fixture is marked `services`. Under xdist
    (`--dist loadgroup`), tests on one expensive fixture share a worker (tests.helpers.xdist_groups). (Slow tests first
    was tried, 2026-11-28: 47.2 min against 43.7 — they then ran beside the smoke's cluster
    experiment, which took 489 s instead of 269 s, and a critical-path check saw Spark's stages grow.)"""
    items.sort(key=lambda item: SMOKE_FIXTURE in getattr(item, "fixturenames", ()))
    for item in items:
        names = getattr(item, "fixturenames", ())
        on_postgres = "any_db" in names and "postgres" in getattr(getattr(item, "callspec", None), "id", "")
        if on_postgres or SERVICE_FIXTURES.intersection(names):
            item.add_marker(pytest.mark.services)


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller owns the smoke run: workers are told where it writes (below)."""
    if _is_controller(config):
        from bench.run import RESULTS
        from tests.helpers.bench_smoke import EXISTING_ENV, BackgroundSmoke

        if not os.environ.get(EXISTING_ENV):  # the tests check a finished run: none is started
            config.stash[_SMOKE] = BackgroundSmoke(RESULTS, Path(tempfile.mkdtemp(prefix="ballast-bench-smoke-")))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller: hand each worker the smoke run's files (it may start only later)."""
    smoke = node.config.stash.get(_SMOKE, None)
    if smoke is not None:
        node.workerinput["ballast_smoke"] = {**smoke.run.as_dict(), "started_at": time.time()}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """xdist controller: start the smoke run as soon as a worker has collected one of its tests."""
    smoke = node.config.stash.get(_SMOKE, None)
    if smoke is None or smoke.proc is not None or not any(i.startswith(SMOKE_TESTS) for i in ids):
        return
    with _exclusive("kafka"):  # the smoke uses the stack's broker
        if not stack.default_broker().alive():
            stack.kafka_up()
            _owned_mark("kafka").touch()
    smoke.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    """xdist controller: stop the smoke if it still runs, and the shared services workers started."""
    if not _is_controller(config):
        return
    smoke = config.stash.get(_SMOKE, None)
    if smoke is not None:
        smoke.stop()
        if smoke.proc is None:  # no smoke test was selected (`make test-fast`): its log dir stays empty
            shutil.rmtree(Path(smoke.run.log).parent, ignore_errors=True)
    for service, down in (("kafka", stack.kafka_down), ("postgres", stack.postgres_down)):
        if _owned_mark(service).exists():
            down()
            _owned_mark(service).unlink()


@pytest.fixture(scope="session", autouse=True)
def bench_smoke(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Starts `bench.run --smoke` in the background when any selected test reads its result (see
    tests/helpers/bench_smoke.py for why); stops it if the session ends first. Under xdist the
    controller started it, and this is a handle to wait on it. With BALLAST_BENCH_SMOKE_DIR set to a
    finished run's result dir, that run is checked and nothing is started."""
    if not any(SMOKE_FIXTURE in getattr(i, "fixturenames", ()) for i in request.session.items):
        yield None
        return
    from bench.run import RESULTS
    from tests.helpers.bench_smoke import BackgroundSmoke, SmokeRun, existing_run

    finished = existing_run()
    if finished is not None:  # BALLAST_BENCH_SMOKE_DIR: an earlier run's results, checked as they are
        yield finished
        return
    if _is_worker(request.config):
        yield BackgroundSmoke(RESULTS, RESULTS, SmokeRun(**request.config.workerinput["ballast_smoke"]))
        return
    request.getfixturevalue("kafka_bootstrap")
    smoke = BackgroundSmoke(RESULTS, tmp_path_factory.mktemp("bench-smoke"))
    smoke.start()
    yield smoke
    smoke.stop()


@pytest.fixture(scope="session")
def postgres_base_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The stack's throwaway PostgreSQL cluster (Debian's postgresql installed when absent).

    Stopped at the end of the session when this session started it."""
    svc = _start(_shared_service(request.config, "postgres", lambda: stack.default_postgres().alive(),
                                 stack.postgres_up, stack.postgres_down),
                 "PostgreSQL could not be installed or started here")
    yield stack.postgres_url()
    next(svc, None)


@pytest.fixture
def s3_server(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A real S3-compatible server (s3s-fs, scripts/stack_s3.py) of this test alone, on its own port,
    logging every request, with bucket `ballast`; the AWS SDK variables point this process (and
    what it starts) at it. The test may kill or stop it and start it again (`kill()`, `down()`, `up()`)."""
    srv = stack.S3Server(tmp_path_factory.mktemp("s3"), stack.free_port(), log_requests=True)
    try:
        srv.up()
    except stack.StackError as exc:
        pytest.fail(f"the S3 server could not start: {exc}")
    for k, v in srv.env().items():
        monkeypatch.setenv(k, v)
    yield srv
    srv.down()


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


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite metrics DB migrated to head per worker, its WAL folded into the file: what each
    test's `db_url` copies. Alembic's upgrade is 0.05-0.3 CPU s, paid once here instead of by every
    test that takes a DB (tests/migrations_db migrates DBs of its own)."""
    import sqlite3

    from migrations_db.db import migrate

    path = tmp_path_factory.mktemp("migrated") / "metrics.db"
    migrate(f"sqlite:///{path}")
    con = sqlite3.connect(path)
    try:  # a WAL's frames (if Alembic left the file in WAL mode: -1, -1 if not) into the file, which alone is copied
        busy, frames, done = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0 and frames == done, f"{path}: the WAL was not checkpointed ({busy}, {frames}, {done})"
    finally:
        con.close()
    return path


@pytest.fixture
def db_url(tmp_path: Path, migrated_sqlite: Path) -> str:
    """A fresh, migrated SQLite metrics DB for one test (a copy of the session's migrated file)."""
    dst = tmp_path / "metrics.db"
    shutil.copyfile(migrated_sqlite, dst)
    return f"sqlite:///{dst}"
