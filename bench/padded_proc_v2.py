"""The upgrade experiment's processor, version 2 (over `bench.padded_proc`, version 1): its state
`tally` holds (n, padding, records seen by version 2); its outputs carry the version. The
`StateUpgrade`s rename and extend version 1's state and take it back, so the experiment upgrades
to it and rolls back. Run by an upgrade step: `code: bench.padded_proc_v2:PaddedCounter`, version 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bench.padded import padding, value_bytes
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, StateUpgrade, TimerValues


class PaddedCounter(StatefulProcessor):
    ballast_version = "2"
    ballast_upgrades = (
        StateUpgrade("1", "2", rename={"count": "tally"}, values={"tally": lambda v: (v[0], v[1], 0)}),
        StateUpgrade("2", "1", rename={"tally": "count"}, values={"count": lambda v: (v[0], v[1])}),
    )

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.tally = handle.get_value_state("tally")
        self.pad = max(0, value_bytes() - 8)

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n, pad, mine = self.tally.get() or (0, None, 0)
        k = sum(1 for _ in rows)
        self.tally.update((n + k, pad if pad is not None else padding(str(key[0]).encode(), self.pad), mine + k))
        yield {"key": key[0], "count": n + k, "v": "2"}
