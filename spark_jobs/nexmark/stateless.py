"""Q1 (currency conversion) and Q2 (selection): stateless, so all their work is Spark SQL before
the routing (QuerySpec.where / columns) and the processor only passes each row through.

They still run as Ballast jobs (bins, routing, exactly-once output) with no state: a migration of
their bins moves nothing, and a restart replays the epoch's input into the same output ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.nexmark import BID, KIND, SCHEMA
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query

AUCTION_SKIP = 123


class PassThrough(StatefulProcessor):
    """Emits `fields` of every input row; holds no state."""

    fields: tuple[str, ...] = ()

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        return iter([{f: getattr(r, f) for f in self.fields} for r in rows])


class _Q1(PassThrough):
    fields = ("auction", "bidder", "price", "date_time")


class _Q2(PassThrough):
    fields = ("auction", "price")


Q1 = query(_Q1, input_schema=SCHEMA, source_column=KIND, grouping_keys=("auction",), where=f"{KIND} = {BID}",
           columns=(("price", "CAST(price * 89 DIV 100 AS BIGINT)"),))
Q2 = query(_Q2, input_schema=SCHEMA, source_column=KIND, grouping_keys=("auction",),
           where=f"{KIND} = {BID} AND auction % {AUCTION_SKIP} = 0")
