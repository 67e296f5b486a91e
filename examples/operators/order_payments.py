"""A two-topic stream-stream join as a Ballast processor: orders ⋈ payments on the order id.

Orders (`{"id", "ts", "amount"}`) and payments (`{"id", "ts", "method"}`) arrive on two topics
keyed the same way (the order id). Each side is kept per id in a ListState; a new row is matched
against the other side's kept rows, and a pair is emitted once, when its second row arrives, if
the two event times are less than HORIZON_MS apart (Spark's time-bounded stream-stream inner
join). State is cleaned up by event-time timers: a kept row is dropped once the watermark passes
its time + HORIZON_MS — no later row of the other side can match it without being late.

Run it with the two topics as the operator's inputs (`source` tells which one a row came from):

    PYTHONPATH=examples/operators python -m spark_jobs.cli run --job pay --operator \
        order_payments:OrderPayments --input-topic orders,payments --checkpoint-dir /tmp/pay
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyspark.sql import Row

from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query

HORIZON_MS = 5_000
LATENESS_MS = 10_000
INPUT_SCHEMA = "id string, ts timestamp, amount long, method string"
ORDERS, PAYMENTS = 0, 1  # positions of the two topics in --input-topic


def _ms(ts: Any) -> int:
    return round(ts.timestamp() * 1000)


class OrderPaymentJoin(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.orders = handle.getListState("orders", "ts long, amount long")
        self.payments = handle.getListState("payments", "ts long, method string")

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: Any) -> Iterator[Row]:
        out = []
        for row in rows:
            ms = _ms(row.ts)
            if row.source == ORDERS:
                out += [Row(id=key[0], order_ms=ms, payment_ms=p, amount=row.amount, method=method)
                        for p, method in self.payments.get() if abs(ms - p) < HORIZON_MS]
                self.orders.appendValue((ms, row.amount))
            else:
                out += [Row(id=key[0], order_ms=o, payment_ms=ms, amount=amount, method=row.method)
                        for o, amount in self.orders.get() if abs(ms - o) < HORIZON_MS]
                self.payments.appendValue((ms, row.method))
            self.handle.registerTimer(ms + HORIZON_MS)
        return iter(out)

    def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Row]:
        wm = timerValues.getCurrentWatermarkInMs()
        for side in (self.orders, self.payments):
            kept = [r for r in side.get() if r[0] + HORIZON_MS > wm]
            side.put(kept)
        return iter([])

    def close(self) -> None:
        pass


OrderPayments = query(OrderPaymentJoin, input_schema=INPUT_SCHEMA, grouping_keys=("id",), time_mode="EventTime",
                      event_time_column="ts", lateness_ms=LATENESS_MS, source_column="source")


def reference(orders: list[dict[str, Any]], payments: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """Pure Python: every (id, order ms, payment ms) pair less than HORIZON_MS apart (no row late)."""
    by_id: dict[str, list[int]] = {}
    for o in orders:
        by_id.setdefault(o["id"], []).append(o["ts_ms"])
    return sorted((p["id"], o, p["ts_ms"]) for p in payments for o in by_id.get(p["id"], ())
                  if abs(o - p["ts_ms"]) < HORIZON_MS)
