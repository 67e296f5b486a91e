"""A processing-time processor for the tests: a reminder per key 1.5 s after its last record; the
remembered value has a 1 s TTL, so it has expired when the reminder fires."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.processor import QuerySpec, StatefulProcessor, StatefulProcessorHandle, TimerValues

DELAY_MS, TTL_MS = 1_500, 1_000


class Reminder(StatefulProcessor):
    ballast_query = QuerySpec(time_mode="ProcessingTime")

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.seen = handle.get_value_state("seen", "value string", ttl_duration_ms=TTL_MS)
        self.count = handle.get_value_state("count", "n long")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n = (self.count.get() or (0,))[0]
        for row in rows:
            n += 1
            self.seen.update((row.value,))
        self.count.update((n,))
        for t in list(self.handle.list_timers()):
            self.handle.delete_timer(t)
        self.handle.register_timer(timer_values.get_current_processing_time_in_ms() + DELAY_MS)
        return iter(())

    def handle_expired_timer(self, key: tuple, timer_values: TimerValues, expired_timer_info: Any) -> Iterator[Any]:
        yield {"key": key[0], "count": self.count.get()[0], "seen": self.seen.get()}
        self.count.clear()
