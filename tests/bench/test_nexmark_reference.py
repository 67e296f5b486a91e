"""NEXMark reference answers on small hand-computed inputs, and the comparison rule."""

from __future__ import annotations

import random

import pytest

from bench.nexmark import reference as R
from bench.nexmark.generator import events
from bench.nexmark.model import Auction, Bid, NexmarkConfig, Person

pytestmark = pytest.mark.bench


def P(pid: int, t: int, state: str = "OR", name: str = "") -> Person:
    return Person(pid, name or f"p{pid}", "e@x.com", "0000 0000 0000 0000", "Bend", state, t, "")


def A(aid: int, seller: int, t: int = 0, expires: int = 10**6, category: int = 10, reserve: int = 1) -> Auction:
    return Auction(aid, "item", "desc", 1, reserve, t, expires, seller, category, "")


def B(auction: int, price: int, t: int, bidder: int = 1) -> Bid:
    return Bid(auction, bidder, price, t, "")


def test_q1_currency_conversion() -> None:
    evs = [P(1, 0), A(2, 1), B(1000, 100, 5, bidder=2000), B(1001, 999, 6, bidder=2001)]
    assert R.q1(evs) == [{"auction": 1000, "bidder": 2000, "price": 89, "date_time": 5},
                         {"auction": 1001, "bidder": 2001, "price": 889, "date_time": 6}]


def test_q2_selection() -> None:
    evs = [B(1230, 7, 1), B(1231, 8, 2), B(1107, 5, 3), A(1230, 1)]
    assert R.q2(evs) == [{"auction": 1107, "price": 5}, {"auction": 1230, "price": 7}]


def test_q3_local_item_suggestion() -> None:
    evs = [P(1, 100, "OR", "Ann"), P(2, 100, "WA"), P(3, 900, "CA", "Cy"),
           A(10, seller=1, t=200), A(11, seller=2, t=200), A(12, seller=3, category=11, t=200),
           A(13, seller=3, t=50),  # before its seller registered: still joined (no expiry)
           A(14, seller=99, t=200)]
    assert R.q3(evs) == [{"name": "Ann", "city": "Bend", "state": "OR", "id": 10},
                         {"name": "Cy", "city": "Bend", "state": "CA", "id": 13}]


def _auctions_and_bids() -> list:
    return [
        A(100, seller=5, category=10, t=0, expires=1000, reserve=50),
        B(100, 40, 10), B(100, 70, 20), B(100, 60, 500), B(100, 90, 1000),  # 40 < reserve; 90 at expiry: late
        A(101, seller=5, category=10, t=0, expires=2000, reserve=10),
        B(101, 15, 5, bidder=7), B(101, 15, 3, bidder=9),  # tie: the earlier bid wins
        A(102, seller=6, category=11, t=0, expires=3000, reserve=10), B(102, 8, 5),  # below reserve: no winner
        A(103, seller=6, category=11, t=0, expires=5000, reserve=1), B(103, 41, 4000),
        A(104, seller=6, category=12, t=100, expires=200, reserve=1), B(104, 5, 50),  # bid before the auction
    ]


def test_winning_bids() -> None:
    won = R.winning_bids(_auctions_and_bids())
    assert [(a.id, b.price, b.date_time, b.bidder) for a, b in won] == [(100, 70, 20, 1), (101, 15, 3, 9),
                                                                       (103, 41, 4000, 1)]
    assert [a.id for a, _ in R.winning_bids(_auctions_and_bids(), until_ms=1999)] == [100]


def test_winners_are_the_first_operators_rows() -> None:
    assert R.winners(_auctions_and_bids(), until_ms=2000) == [
        {"auction": 100, "seller": 5, "category": 10, "expires": 1000, "price": 70, "bidder": 1, "date_time": 20},
        {"auction": 101, "seller": 5, "category": 10, "expires": 2000, "price": 15, "bidder": 9, "date_time": 3}]


def test_q4_average_price_per_category() -> None:
    evs = _auctions_and_bids()
    # the changelog: an update per closed auction, in closing order (100, 101, 103)
    assert R.q4(evs) == [{"category": 10, "avg_price": 70, "count": 1},
                         {"category": 10, "avg_price": 43, "count": 2},  # (70 + 15) / 2 = 42.5 -> 43
                         {"category": 11, "avg_price": 41, "count": 1}]
    assert R.last_per_key("q4", R.q4(evs)) == [{"category": 10, "avg_price": 43, "count": 2},
                                               {"category": 11, "avg_price": 41, "count": 1}]
    assert R.q4(evs, until_ms=2000) == R.q4(evs)[:2]
    assert R.q4(evs, until_ms=1999) == [{"category": 10, "avg_price": 70, "count": 1}]


def test_q4_updates_follow_the_batches_the_operator_read() -> None:
    w100, w101, w103 = R.winners(_auctions_and_bids())
    # 101 and 103 in one epoch, 100 (closed first, handed on late) in the next: one row per category per batch
    assert R.q4_updates([[w101, w103], [], [w100]]) == [{"category": 10, "avg_price": 15, "count": 1},
                                                        {"category": 11, "avg_price": 41, "count": 1},
                                                        {"category": 10, "avg_price": 43, "count": 2}]
    assert R.q4_updates([[w100, w101, w103]]) == R.last_per_key("q4", R.q4(_auctions_and_bids()))


def test_q5_hot_items_sliding_window() -> None:
    evs = [B(1, 0, t) for t in (1000, 6000, 7000)] + [B(2, 0, t) for t in (6500, 8000, 9000, 12000)] + [P(9, 1)]
    rows = [(r["window_start"], r["auction"], r["count"]) for r in R.q5(evs)]
    # [-5s, 5s): A 1 | [0, 10s): A 3, B 3 (tie: both) | [5s, 15s): A 2, B 4 | [10s, 20s): B 1
    assert rows == [(-5000, 1, 1), (0, 1, 3), (0, 2, 3), (5000, 2, 4), (10000, 2, 1)]
    assert all(r["window_end"] == r["window_start"] + 10000 for r in R.q5(evs))
    assert [r["window_start"] for r in R.q5(evs, until_ms=15000)] == [-5000, 0, 0, 5000]
    with pytest.raises(ValueError, match="multiple"):
        R.q5(evs, size_ms=10000, period_ms=3000)


def test_q6_average_of_last_ten_closed_auctions_per_seller() -> None:
    evs: list = []
    for i in range(12):  # higher ids close earlier: closing order is 211, 210, ..., 200
        evs += [A(200 + i, seller=5, expires=10000 - 10 * i), B(200 + i, i + 1, 5)]
    evs += [A(300, seller=6, expires=50), B(300, 7, 5)]
    rows = R.q6(evs)  # an update per closed auction: 300 first, then 211 (price 12), 210 (11), ...
    assert len(rows) == 13 and rows[:3] == [{"seller": 6, "avg_price": 7, "count": 1},
                                            {"seller": 5, "avg_price": 12, "count": 1},
                                            {"seller": 5, "avg_price": 12, "count": 2}]  # 23 / 2 -> 12
    # seller 5's last 10 closed are 209..200 with prices 10..1: 55 / 10 = 5.5 -> 6
    assert R.last_per_key("q6", rows) == [{"seller": 5, "avg_price": 6, "count": 10},
                                          {"seller": 6, "avg_price": 7, "count": 1}]
    # by 9950 only 211..205 have closed (prices 12..6): 63 / 7 = 9
    assert R.last_per_key("q6", R.q6(evs, until_ms=9950)) == [{"seller": 5, "avg_price": 9, "count": 7},
                                                              {"seller": 6, "avg_price": 7, "count": 1}]
    # 210 and 211 (closed first) read after the other ten: they are older than the last 10, the
    # average stays, and the operator emits the same row again — both count in the multiset
    won = {w["auction"]: w for w in R.winners(evs) if w["seller"] == 5}
    late = R.q6_updates([[won[a] for a in range(200, 210)], [won[210], won[211]]])
    assert late == [{"seller": 5, "avg_price": 6, "count": 10}] * 2
    assert R.diff("q6", late, late[:1]) is not None


def test_q7_highest_bid_per_tumbling_window() -> None:
    evs = [B(1, 5, 1000), B(2, 9, 2000, bidder=3), B(4, 9, 3000, bidder=5), B(6, 1, 12000), B(7, 3, 19999)]
    assert R.q7(evs) == [
        {"window_start": 0, "window_end": 10000, "auction": 2, "bidder": 3, "price": 9, "date_time": 2000},
        {"window_start": 0, "window_end": 10000, "auction": 4, "bidder": 5, "price": 9, "date_time": 3000},
        {"window_start": 10000, "window_end": 20000, "auction": 7, "bidder": 1, "price": 3, "date_time": 19999}]
    assert [r["auction"] for r in R.q7(evs, until_ms=19999)] == [2, 4]


def test_q8_new_users_tumbling_window() -> None:
    evs = [P(1, 1000, name="a"), P(2, 9999), P(3, 15000, name="c"),
           A(10, seller=1, t=2000, reserve=100), A(11, seller=2, t=10000),  # person 2's window has ended
           A(12, seller=3, t=11000, reserve=300),  # auction before person, same window
           A(13, seller=1, t=500, reserve=50), A(14, seller=4, t=3000), B(10, 5, 2500)]
    assert R.q8(evs) == [
        {"window_start": 0, "window_end": 10000, "id": 1, "name": "a", "reserve": 50, "auction": 13},
        {"window_start": 0, "window_end": 10000, "id": 1, "name": "a", "reserve": 100, "auction": 10},
        {"window_start": 10000, "window_end": 20000, "id": 3, "name": "c", "reserve": 300, "auction": 12}]
    assert [r["auction"] for r in R.q8(evs, until_ms=10000)] == [13, 10]


def test_answers_do_not_depend_on_delivery_order() -> None:
    evs = events(NexmarkConfig(rate=2000, max_disorder=40), 20000)
    shuffled = list(evs)
    random.Random(3).shuffle(shuffled)
    for name, f in R.QUERIES.items():
        rows = f(evs)
        assert rows, name  # every query has answers on the generated stream
        assert R.diff(name, rows, f(shuffled)) is None, name


def test_diff_rule() -> None:
    evs = events(NexmarkConfig(rate=2000), 10000)
    q1 = R.q1(evs)
    assert R.diff("q1", q1, list(reversed(q1))) is None
    assert R.diff("q1", q1 + [q1[0]], q1) is not None  # a multiset: a missing duplicate counts
    for name, f in R.QUERIES.items():  # every query is a multiset: order is free, a repeated row is a difference
        rows = f(evs)
        assert R.diff(name, rows, list(reversed(rows))) is None, name
        problem = R.diff(name, rows, rows + rows[-1:])
        assert problem is not None and "1 unexpected (or repeated)" in problem and "0 expected rows missing" in problem
        assert R.diff(name, rows, rows[1:]) is not None, name
    q4 = R.q4(evs)
    assert R.diff("q4", q4, q4[:-1] + [dict(q4[-1], avg_price=0)]) is not None  # a wrong update, even an earlier one
    assert R.diff("q4", q4, R.last_per_key("q4", q4)) is not None  # the finals alone are not every update
    won = R.winners(evs)
    assert R.diff("winners", won, won) is None and R.diff("winners", won, won[1:]) is not None
    with pytest.raises(ValueError, match="unknown query"):
        R.canonical("q9", [])
