"""NEXMark Q4/Q6's stages (spark_jobs/nexmark/winning.py) on the processor handle, without Spark:
the best valid bid wins, emitted once at the auction's end, and no key keeps state after it (bids
that come before their auction, after it closed, or for an auction that never comes); the
averages per category and per seller's last ten auctions round half up."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spark_jobs.nexmark import AUCTION, BID, LATENESS_MS
from spark_jobs.nexmark.winning import (
    WINNER_SCHEMA,
    CategoryAverage,
    CategoryAverageProcessor,
    SellerAverage,
    SellerAverageProcessor,
    WinningBidProcessor,
    WinningBids,
)
from tests.helpers.processor_key import ProcessorKey


def _bid(price: int, at: int, bidder: int = 1) -> Any:
    return SimpleNamespace(kind=BID, price=price, date_time=at, bidder=bidder)


def _auction(at: int, expires: int, reserve: int = 10) -> Any:
    return SimpleNamespace(kind=AUCTION, date_time=at, expires=expires, reserve=reserve, seller=3, category=4)


def _key() -> ProcessorKey:
    """One auction's key: its state, its processor, and its timers fired as the epoch loop does."""
    return ProcessorKey(WinningBidProcessor(), (7,))


def test_early_bids_count_and_the_winner_is_emitted_once_at_expiry() -> None:
    k = _key()
    assert k.rows(_bid(50, 1000)) == [] and k.state.timers == {1001}
    k.rows(_auction(900, 5000), _bid(40, 1100, bidder=2))
    assert k.state.timers == {5000}  # the early bid's clean-up timer went with its wait
    assert k.fire(4999) == []
    assert k.fire(5000) == [{"auction": 7, "seller": 3, "category": 4, "expires": 5000, "price": 50,
                             "bidder": 1, "date_time": 1000}]
    assert k.state.empty() and k.fire(10_000) == []


def test_no_state_outlives_its_auction() -> None:
    k = _key()
    k.rows(_auction(900, 5000))
    k.fire(5000)
    assert k.state.empty()
    k.rows(_bid(99, 5200))  # after the close: waits like an early bid, until the watermark passes it
    assert not k.state.empty()
    assert k.fire(5201) == [] and k.state.empty()

    never = _key()
    never.rows(_bid(99, 300), _bid(98, 310))  # an auction that never comes
    assert never.fire(305) == [] and not never.state.empty()
    assert never.fire(311) == [] and never.state.empty()


def test_only_a_valid_bid_wins_and_ties_go_to_the_earlier_then_the_lower_bidder() -> None:
    k = _key()
    k.rows(_auction(1000, 5000, reserve=20))
    k.rows(_bid(19, 1500),  # under the reserve
           _bid(99, 999),  # before the auction opened (it arrived later than the auction)
           _bid(99, 5000),  # at its close: too late
           _bid(30, 2000, bidder=5), _bid(30, 1800, bidder=6), _bid(30, 1800, bidder=4), _bid(25, 1700))
    [winner] = k.fire(5000)
    assert (winner["price"], winner["date_time"], winner["bidder"]) == (30, 1800, 4)


def test_an_auction_without_a_valid_bid_emits_nothing_and_keeps_nothing() -> None:
    k = _key()
    k.rows(_auction(1000, 5000, reserve=100), _bid(50, 2000))
    assert k.fire(5000) == [] and k.state.empty()


def _winner(price: int, expires: int, auction: int = 1) -> Any:
    return SimpleNamespace(price=price, expires=expires, auction=auction)


def test_a_categorys_average_is_the_running_mean_rounded_half_up() -> None:
    k = ProcessorKey(CategoryAverageProcessor(), (4,), "None")
    assert k.rows(_winner(1, 10), _winner(2, 11)) == [{"category": 4, "avg_price": 2, "count": 2}]  # 1.5 -> 2
    assert k.rows(_winner(4, 12)) == [{"category": 4, "avg_price": 2, "count": 3}]  # 7 / 3 = 2.33
    assert k.rows(_winner(10, 13)) == [{"category": 4, "avg_price": 4, "count": 4}]  # 17 / 4 = 4.25


def test_a_sellers_average_is_over_the_last_ten_auctions_in_closing_order() -> None:
    k = ProcessorKey(SellerAverageProcessor(), (3,), "None")
    out = k.rows(*[_winner(100, 1000 + i, auction=i) for i in range(10)])
    assert out == [{"seller": 3, "avg_price": 100, "count": 10}]
    # a later epoch brings one that closed before them all (dropped) and one after (replaces the oldest)
    assert k.rows(_winner(1, 999, auction=50), _winner(1100, 2000, auction=51)) == [
        {"seller": 3, "avg_price": 200, "count": 10}]
    assert sorted(e[0][1] for e in k.state.lists["last"]) == [*range(1, 10), 51]


def test_the_stages_read_what_their_native_twins_read() -> None:
    win, cat, sel = (q.ballast_query for q in (WinningBids, CategoryAverage, SellerAverage))
    assert win.sources == (AUCTION, BID) and win.grouping_keys == ("auction_id",)
    assert win.time_mode == "EventTime" and win.lateness_ms == LATENESS_MS
    assert cat.grouping_keys == ("category",) and sel.grouping_keys == ("seller",)
    assert cat.input_schema == sel.input_schema == WINNER_SCHEMA and cat.sources is None
