"""Poll until a condition holds: the one wait loop of the tests (services, jobs and DAG runs are
asynchronous; a test states what it waits for, so a timeout says what did not happen)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(pred: Callable[[], T], timeout: float, what: str, poll: float = 0.5,
               check: Callable[[], None] | None = None) -> T:
    """`pred()`'s first truthy value, polled every `poll` s; AssertionError naming `what` after
    `timeout` s. `check` runs before each poll, to fail early (e.g. "the job is still alive")."""
    deadline = time.monotonic() + timeout
    while True:
        if check:
            check()
        result = pred()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)
