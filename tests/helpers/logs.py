"""The messages the `ballast` loggers write during a block (what an operator would read)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ballast_log_lines(level: int = logging.INFO) -> Iterator[list[str]]:
    """Yields a list that fills with every `ballast.*` log message at `level` or above."""
    lines: list[str] = []
    handler = logging.Handler(level)
    handler.emit = lambda rec: lines.append(rec.getMessage())  # type: ignore[method-assign]
    root = logging.getLogger("ballast")
    old = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old)
