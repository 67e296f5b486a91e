"""Tumbling event-time windows per user, written for Spark's `transformWithState`.

The processor below is plain PySpark 4 (`pyspark.sql.streaming.StatefulProcessor`). Under Spark:
`start_spark(df)`. Under Ballast the same class runs as is, or with its import changed to
`from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle` (no PySpark class
needed); only the start differs: `WindowCounts` below, `--operator window_counts:WindowCounts`.
Each (user, window) is emitted once, when the watermark passes the window's end (an event-time
timer); the window's count and amount total live in a MapState keyed by the window start.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

WINDOW_MS = 10_000
LATENESS_MS = 5_000
INPUT_SCHEMA = "user string, ts timestamp, amount long"
OUTPUT_SCHEMA = "user string, window_start long, count long, total long"


class WindowCountsProcessor(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = handle.getMapState("windows", "start long", "count long, total long")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        for row in rows:
            ms = int(row.ts.timestamp() * 1000)
            start = ms - ms % WINDOW_MS
            count, total = self.windows.getValue((start,)) or (0, 0)
            if count == 0:
                self.handle.registerTimer(start + WINDOW_MS)
            self.windows.updateValue((start,), (count + 1, total + row.amount))
        return iter([])

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        start = expiredTimerInfo.getExpiryTimeInMs() - WINDOW_MS
        count, total = self.windows.getValue((start,))
        self.windows.removeKey((start,))
        yield Row(user=key[0], window_start=start, count=count, total=total)

    def close(self) -> None:
        pass


def start_spark(kafka_df: Any) -> Any:
    """The query under Spark's own operator (a streaming DataFrame of Kafka records in)."""
    from pyspark.sql import functions as F

    rows = kafka_df.select(F.from_json(F.col("value").cast("string"), INPUT_SCHEMA).alias("r")).select("r.*")
    return (rows.withWatermark("ts", f"{LATENESS_MS} milliseconds").groupBy("user")
            .transformWithState(WindowCountsProcessor(), OUTPUT_SCHEMA, "Append", "EventTime"))


def ballast_start() -> type:
    """The same query under Ballast: input schema, grouping, time mode, watermark."""
    from spark_jobs.processor import query

    return query(WindowCountsProcessor, input_schema=INPUT_SCHEMA, grouping_keys=("user",), time_mode="EventTime",
                 event_time_column="ts", lateness_ms=LATENESS_MS)


WindowCounts = ballast_start()
