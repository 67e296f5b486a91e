"""Q4 and Q6 as a chain of two operators: the winning bid of each auction, then an average.

Stage 1, `WinningBids`, keyed by auction id (an auction's `id`, a bid's `auction`): keeps the
auction and its best valid bid (price >= reserve, auction.date_time <= bid.date_time < expires;
ties to the earlier bid, then the lower bidder) and emits the winner once, from an event-time
timer at `expires`; auctions without a valid bid emit nothing. A bid that arrives before its
auction waits in a ListState until the watermark passes it (a timer at its time + 1): an auction
that comes later is older than the watermark, so late and dropped, and the bid could never count.
The same timer drops a bid that arrives after its auction closed, so no key outlives its auction.
Stage 2 reads stage 1's output (the chain's hand-off topic):
`CategoryAverage` (Q4, keyed by category: running average over all closed auctions) and
`SellerAverage` (Q6, keyed by seller: average of the last 10 auctions in closing order, expires
then auction id); each emits its key's new value once per epoch that reads winners of the key
(every such update is an answer row, bench.nexmark.reference.q4_updates / q6_updates; the last one
per key is final).
Run: `--operator winners=spark_jobs.nexmark.winning:WinningBids --operator
q4=spark_jobs.nexmark.winning:CategoryAverage` (or `q6=...:SellerAverage`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from spark_jobs.nexmark import AUCTION, BID, KIND, LATENESS_MS, fields
from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle, query

LAST = 10
WINNER_SCHEMA = "auction long, seller long, category long, expires long, price long, bidder long, date_time long"


def _better(bid: tuple, best: tuple | None) -> bool:
    """bid = (price, date_time, bidder): a higher price, then an earlier time, then a lower bidder."""
    return best is None or (-bid[0], bid[1], bid[2]) < (-best[0], best[1], best[2])


class WinningBidProcessor(StatefulProcessor):
    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.auction = handle.get_value_state("auction")  # (date_time, expires, reserve, seller, category)
        self.best = handle.get_value_state("best")  # (price, date_time, bidder)
        self.early = handle.get_list_state("early")  # bids seen before their auction

    def _offer(self, bid: tuple) -> None:
        a = self.auction.get()
        if a is not None and bid[0] >= a[2] and a[0] <= bid[1] < a[1] and _better(bid, self.best.get()):
            self.best.update(bid)

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        for r in rows:
            if r.kind == AUCTION:
                self.auction.update((r.date_time, r.expires, r.reserve, r.seller, r.category))
                for bid in self.early.get():
                    self.handle.delete_timer(bid[1] + 1)
                    self._offer(bid)
                self.early.clear()
                self.handle.register_timer(r.expires)
            elif self.auction.exists():
                self._offer((r.price, r.date_time, r.bidder))
            else:
                self.early.append_value((r.price, r.date_time, r.bidder))
                self.handle.register_timer(r.date_time + 1)
        return iter(())

    def handle_expired_timer(self, key: tuple, timer_values: Any, expired_timer_info: Any) -> Iterator[Any]:
        a = self.auction.get()
        if a is None:  # waiting bids the watermark passed: their auction can no longer come
            upto = expired_timer_info.get_expiry_time_in_ms()
            waiting = [bid for bid in self.early.get() if bid[1] + 1 > upto]
            if waiting:
                self.early.put(waiting)
            else:
                self.early.clear()
            return iter(())
        best = self.best.get()  # the auction's end (early bids' timers went when it arrived)
        self.auction.clear()
        self.best.clear()
        if best is None:
            return iter(())
        return iter([{"auction": key[0], "seller": a[3], "category": a[4], "expires": a[1], "price": best[0],
                      "bidder": best[2], "date_time": best[1]}])


def _avg(total: int, count: int) -> int:
    return (2 * total + count) // (2 * count)  # half up, as bench.nexmark.reference.round_avg


class CategoryAverageProcessor(StatefulProcessor):
    """Q4 stage 2: running average winning price per category."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.sum = handle.get_value_state("sum")  # (total, count)

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        total, count = self.sum.get() or (0, 0)
        for r in rows:
            total, count = total + r.price, count + 1
        self.sum.update((total, count))
        return iter([{"category": key[0], "avg_price": _avg(total, count), "count": count}])


class SellerAverageProcessor(StatefulProcessor):
    """Q6 stage 2: average winning price of the seller's last LAST closed auctions."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.last = handle.get_list_state("last")  # (expires, auction, price), closing order

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: Any) -> Iterator[Any]:
        kept = list(self.last.get()) + [(r.expires, r.auction, r.price) for r in rows]
        kept = sorted(kept)[-LAST:]
        self.last.put(kept)
        prices = [p for _, _, p in kept]
        return iter([{"seller": key[0], "avg_price": _avg(sum(prices), len(prices)), "count": len(prices)}])


_WINNING_READS = fields("id", "date_time", "expires", "reserve", "seller", "category", "auction", "bidder", "price")
WinningBids = query(WinningBidProcessor, input_schema=_WINNING_READS, source_column=KIND, grouping_keys=("auction_id",),
                    time_mode="EventTime", event_time_column="date_time", lateness_ms=LATENESS_MS,
                    where=f"{KIND} IN ({AUCTION}, {BID})",
                    columns=(("auction_id", f"CASE WHEN {KIND} = {AUCTION} THEN id ELSE auction END"),),
                    sources=(AUCTION, BID))
CategoryAverage = query(CategoryAverageProcessor, input_schema=WINNER_SCHEMA, grouping_keys=("category",))
SellerAverage = query(SellerAverageProcessor, input_schema=WINNER_SCHEMA, grouping_keys=("seller",))
