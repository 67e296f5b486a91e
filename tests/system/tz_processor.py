"""A processor for the replay tests whose outputs show every way a replay could differ from the
first attempt: a timestamp column parsed from a string without a zone (the SQL session's zone), the
datetime a handler sees (its str, hour and instant), a set in the output, and a per-key count."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query


class StampsProcessor(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count", "n long")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        n = (self.count.get() or (0,))[0]
        out = []
        for row in rows:
            n += 1
            out.append({"id": key[0], "n": n, "ts": row.ts, "hour": row.ts.hour, "instant_s": row.ts.timestamp(),
                        "tags": {f"t{row.seq % 7}", f"u{row.seq % 5}", key[0]}})
        self.count.update((n,))
        return iter(out)


Stamps = query(StampsProcessor, input_schema="id string, ts timestamp, seq long", grouping_keys=("id",))
