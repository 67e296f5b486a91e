"""Q5 (hot items) and Q7 (highest bid): per event-time window, keyed by the window's start.

Keying by window makes each query one operator: the window's whole answer (the top auction(s) by
bid count, the top bid(s) by price) is in one key's state and is emitted by one event-time timer
at the window's end. The trade-off: a window's bids all go to one key, so a job has only as much
parallelism as open windows (2-3 here) and a hot window is a hot key; keying by auction spreads
the counting but needs a second operator for the per-window maximum (a chain, as Q4/Q6 do).
Q5's sliding windows (10 s every 5 s) are made before routing: each bid is exploded into the two
windows that contain it, and its bids are counted per (window, auction) in Spark's JVM inside the
epoch (`QuerySpec.pre_aggregate`, after the routing's shuffle): the processor sees one row per
auction and window per epoch, not one per bid. Q7 likewise keeps, per window and epoch, only the bids at
the epoch's highest price (in the JVM) for the processor to merge.

Both declare their windows (`QuerySpec.window`: Q5 sliding 10 s every 5 s, Q7 tumbling 10 s), so
their bins can move by handover (docs/handover.md): a window's answer comes only from its timer at
the window's end, and each pre-aggregated group lies in one window (the window start is in
`group_by`), so the groups of every window the new owner keeps (start >= activation) hold rows from
activation on only. A group of an earlier window may straddle the activation timestamp (rows on
both sides; the new owner folds it when its `max(date_time)` is past activation), but that window
ends by the boundary: its output is the old owner's, and the new owner's timer only clears it.
tests/system/test_nexmark_handover.py checks both against the reference with a handover mid-stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ballast.policy.handover import WindowSpec
from spark_jobs.nexmark import BID, KIND, LATENESS_MS, PERIOD_MS, WINDOW_MS, fields
from spark_jobs.processor import PreAggregate, StatefulProcessor, StatefulProcessorHandle, query


class HotItems(StatefulProcessor):
    """Q5: bid count per auction in the window; the auction(s) with the most bids at its end. A row
    is one epoch's bids on one auction in the window (`bids`: how many, counted in the JVM)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.counts = handle.get_map_state("counts")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        for r in rows:
            (n,) = self.counts.get_value((r.auction,)) or (0,)
            self.counts.update_value((r.auction,), (n + r.bids,))
        self.handle.register_timer(key[0] + WINDOW_MS)
        return iter(())

    def handle_expired_timer(self, key: tuple, timer_values: Any, expired_timer_info: Any) -> Iterator[Any]:
        counts = {k[0]: v[0] for k, v in self.counts.iterator()}
        self.counts.clear()
        if not counts:
            return iter(())
        top = max(counts.values())
        start = key[0]
        return iter([{"window_start": start, "window_end": start + WINDOW_MS, "auction": a, "count": n}
                     for a, n in sorted(counts.items()) if n == top])


class HighestBid(StatefulProcessor):
    """Q7: the bid(s) with the highest price in the tumbling window, at its end. A row is one
    epoch's top bids in the window (`top`: every bid at the epoch's highest price, chosen in the JVM)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.top = handle.get_list_state("top")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        top = list(self.top.get())
        for r in rows:
            for b in r.top:
                bid = (b["price"], b["auction"], b["bidder"], b["date_time"])
                if not top or bid[0] > top[0][0]:
                    top = [bid]
                elif bid[0] == top[0][0]:
                    top.append(bid)
        self.top.put(top)
        self.handle.register_timer(key[0] + WINDOW_MS)
        return iter(())

    def handle_expired_timer(self, key: tuple, timer_values: Any, expired_timer_info: Any) -> Iterator[Any]:
        top = sorted(self.top.get())
        self.top.clear()
        start = key[0]
        return iter([{"window_start": start, "window_end": start + WINDOW_MS, "auction": a, "bidder": b,
                      "price": p, "date_time": t} for p, a, b, t in top])


_EVENT_TIME: dict[str, Any] = {"input_schema": fields("auction", "bidder", "price", "date_time"),
                               "source_column": KIND, "grouping_keys": ("window_start",),
                               "time_mode": "EventTime", "event_time_column": "date_time",
                               "lateness_ms": LATENESS_MS, "where": f"{KIND} = {BID}", "sources": (BID,)}
_LAST = f"date_time - date_time % {PERIOD_MS}"
Q5 = query(HotItems, **_EVENT_TIME, columns=(
    ("window_start", f"explode(sequence({_LAST} - {WINDOW_MS - PERIOD_MS}, {_LAST}, {PERIOD_MS}))"),),
    pre_aggregate=PreAggregate(group_by=("window_start", "auction"),
                               aggregates=(("bids", "count(*)"), ("date_time", "max(date_time)"))),
    window=WindowSpec(WINDOW_MS, PERIOD_MS))
Q7 = query(HighestBid, **_EVENT_TIME, columns=(("window_start", f"date_time - date_time % {WINDOW_MS}"),),
           pre_aggregate=PreAggregate(group_by=("window_start",), aggregates=(
               ("top", "filter(collect_list(struct(price, auction, bidder, date_time)), b -> b.price = max(price))"),
               ("date_time", "max(date_time)"))), window=WindowSpec(WINDOW_MS))
