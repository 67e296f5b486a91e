"""Fixtures of the console tests: the stack's real Airflow (own state dir and ports) and a browser."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import console_stack as cs  # noqa: E402


@pytest.fixture(scope="session")
def console_stack(tmp_path_factory, kafka_bootstrap):  # type: ignore[no-untyped-def]
    """Airflow standalone started by scripts/stack.py for these tests; stopped after the session."""
    try:
        st = cs.start(tmp_path_factory.mktemp("console"), f"ui{uuid.uuid4().hex[:6]}", 16, kafka_bootstrap)
    except Exception as exc:  # noqa: BLE001 - the message says what failed
        pytest.fail(f"the stack's Airflow did not come up: {exc}")
    try:
        yield st
    finally:
        cs.stop(st)


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
