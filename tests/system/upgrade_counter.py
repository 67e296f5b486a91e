"""Version 1 of the processor the live-upgrade test deploys versions of: a count per key, in a value
state named `count` holding (n,). Later versions are written by the test at run time into a
directory the job's Python workers do not have on their path, and shipped by the upgrade step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, TimerValues


class Counter(StatefulProcessor):
    ballast_version = "1"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n = (self.count.get() or (0,))[0] + sum(1 for _ in rows)
        self.count.update((n,))
        yield {"key": key[0], "count": n, "v": "1"}
