"""Version 2 of a per-key count, deployed live over version 1 (tests/system/upgrade_counter.py):
version 1 kept `(count,)` in a value state named `count`; version 2 keeps `(count, seen by v2)` in
one named `tally`. Its `StateUpgrade`s say how version 1's state becomes its own and back, so a
running job takes it with an upgrade step (docs/operators.md, "Upgrading a processor live") and
can roll back. tests/system/test_live_upgrade.py ships a copy of this file at run time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, StateUpgrade, TimerValues


class Counter(StatefulProcessor):
    ballast_version = "2"
    ballast_upgrades = (
        # v1 kept (count,) under "count"; v2 keeps (count, seen by v2) under "tally"
        StateUpgrade("1", "2", rename={"count": "tally"}, values={"tally": lambda v: (v[0], 0)}),
        # the way back, so that a rollback to v1 is possible
        StateUpgrade("2", "1", rename={"tally": "count"}, values={"count": lambda v: (v[0],)}),
    )

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.tally = handle.get_value_state("tally")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n, mine = self.tally.get() or (0, 0)
        k = sum(1 for _ in rows)
        self.tally.update((n + k, mine + k))
        yield {"key": key[0], "count": n + k, "v": "2", "mine": mine + k}
