"""The upgrade experiment's processor, version 1: a count per key whose state is padded to
`BALLAST_BENCH_VALUE_BYTES` (default 1024) bytes, so a job reaches a GB of processor state with a
key count the load generator prefills in minutes (as `bench.padded:PaddedCount` does for the fold
API). State `count` holds (n, padding); the padding is the key's blake2b repeated, so a replay writes
the same bytes. Version 2 is `bench.padded_proc_v2` (a module of its own: an executor's Python
worker keeps a module it imported once). Run it as `--operator bench.padded_proc:PaddedCounter`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bench.padded import padding, value_bytes
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, TimerValues


class PaddedCounter(StatefulProcessor):
    ballast_version = "1"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")
        self.pad = max(0, value_bytes() - 8)

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n, pad = self.count.get() or (0, None)
        n += sum(1 for _ in rows)
        self.count.update((n, pad if pad is not None else padding(str(key[0]).encode(), self.pad)))
        yield {"key": key[0], "count": n}
