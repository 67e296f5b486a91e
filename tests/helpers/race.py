"""Races made certain: calls started in threads released by one barrier."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released by one barrier; each result or the exception it raised."""
    gate = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        gate.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:  # noqa: BLE001 - the race's loser is the point of the test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out
