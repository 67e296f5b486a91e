"""NEXMark Q5 and Q7 (spark_jobs/nexmark/windows.py) on the processor handle, without Spark: a
window's key merges its epochs' pre-aggregated rows and emits, once at the window's end, the
auction(s) with the most bids (Q5) or every bid at the highest price (Q7), ties included, then
keeps nothing. (The windowing and pre-aggregation SQL runs in tests/system/test_nexmark_queries.py.)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spark_jobs.nexmark import BID, PERIOD_MS, WINDOW_MS
from spark_jobs.nexmark.windows import Q5, Q7, HighestBid, HotItems
from tests.helpers.processor_key import ProcessorKey

START = 20_000


def _counted(auction: int, bids: int) -> Any:
    """One epoch's bids on one auction in the window, counted in the JVM."""
    return SimpleNamespace(auction=auction, bids=bids)


def _top(*bids: tuple[int, int, int, int]) -> Any:
    """One epoch's bids at its highest price in the window: (price, auction, bidder, date_time)."""
    return SimpleNamespace(top=[{"price": p, "auction": a, "bidder": b, "date_time": t} for p, a, b, t in bids])


def test_hot_items_sums_the_epochs_counts_and_emits_the_top_auctions_at_the_end():
    k = ProcessorKey(HotItems(), (START,))
    assert k.rows(_counted(1, 3), _counted(2, 1)) == [] and k.state.timers == {START + WINDOW_MS}
    assert k.rows(_counted(2, 4), _counted(3, 4)) == []  # a later epoch: auction 2 now has 5
    assert k.fire(START + WINDOW_MS - 1) == []
    assert k.fire(START + WINDOW_MS) == [{"window_start": START, "window_end": START + WINDOW_MS, "auction": 2,
                                          "count": 5}]
    assert k.state.empty()


def test_hot_items_ties_are_all_emitted_in_auction_order():
    k = ProcessorKey(HotItems(), (START,))
    k.rows(_counted(9, 2), _counted(4, 2), _counted(6, 1))
    assert [r["auction"] for r in k.fire(START + WINDOW_MS)] == [4, 9]


def test_highest_bid_keeps_every_bid_at_the_top_price_across_epochs():
    k = ProcessorKey(HighestBid(), (START,))
    k.rows(_top((50, 1, 7, START + 10)), _top((60, 2, 8, START + 20)))
    k.rows(_top((40, 3, 9, START + 30)))  # below the top: dropped
    k.rows(_top((60, 1, 5, START + 40), (60, 4, 2, START + 15)))  # ties: kept
    out = k.fire(START + WINDOW_MS)
    assert [(r["price"], r["auction"], r["bidder"], r["date_time"]) for r in out] == [
        (60, 1, 5, START + 40), (60, 2, 8, START + 20), (60, 4, 2, START + 15)]
    assert all(r["window_start"] == START and r["window_end"] == START + WINDOW_MS for r in out)
    assert k.state.empty() and k.fire(START + 2 * WINDOW_MS) == []


def test_a_higher_price_replaces_the_kept_ties():
    k = ProcessorKey(HighestBid(), (START,))
    k.rows(_top((60, 1, 5, START), (60, 2, 6, START)))
    k.rows(_top((61, 3, 7, START + 1)))
    assert [r["auction"] for r in k.fire(START + WINDOW_MS)] == [3]


def test_the_queries_key_by_window_and_pre_aggregate_in_the_jvm():
    q5, q7 = Q5.ballast_query, Q7.ballast_query
    for spec in (q5, q7):
        assert spec.sources == (BID,) and spec.grouping_keys == ("window_start",) and spec.time_mode == "EventTime"
    assert q5.pre_aggregate.group_by == ("window_start", "auction") and dict(q5.pre_aggregate.aggregates)["bids"]
    assert q7.pre_aggregate.group_by == ("window_start",) and "top" in dict(q7.pre_aggregate.aggregates)
    # Q5's sliding windows: a bid is in the windows starting at its last period start and the one before
    assert f"sequence(date_time - date_time % {PERIOD_MS} - {WINDOW_MS - PERIOD_MS}" in dict(q5.columns)["window_start"]
    assert dict(q7.columns)["window_start"] == f"date_time - date_time % {WINDOW_MS}"
