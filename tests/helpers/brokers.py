"""A Kafka broker of a test's own (a fault test stops it, a security test turns on SASL), so the
shared session broker (tests/conftest.py) is never disturbed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.procs import free_port


@contextmanager
def own_broker(root: Path, name: str, auth: str = "none") -> Iterator[Any]:
    """scripts/stack.py's KafkaBroker on free ports under `root`, up for the `with` block, then
    down; the test fails (never skips) when it cannot start."""
    import ballast_stack as stack  # scripts/stack.py, loaded by tests/conftest.py

    broker = stack.KafkaBroker(root, free_port(), free_port(), auth=auth, name=name)
    try:
        broker.up()
    except stack.StackError as exc:
        pytest.fail(f"Kafka broker {name} could not start: {exc}")
    try:
        yield broker
    finally:
        broker.down()
