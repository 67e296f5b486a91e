"""Reference answers to NEXMark Q1-Q8 in pure Python, for checking a streaming job's output.

Every function takes the events a job read (any order: the answers depend on event times, not on
delivery order) and returns rows as dicts, sorted. Semantics follow Beam's `queries/Query*Model`
and the original NEXMark query statements; where they leave a choice, it is made here:

- Windows are in event time, aligned to the Unix epoch, [start, start + size). Q5 slides
  (size 10 s, every 5 s: Beam's windowSizeSec / windowPeriodSec); Q7 and Q8 tumble (10 s).
- `until_ms` is the job's final watermark: only windows with end <= until_ms, and only auctions
  with expires <= until_ms, are complete and answered (None: everything, as if the stream ended).
- Winning bid of an auction (Q4, Q6): the highest-priced bid with price >= reserve and
  auction.date_time <= bid.date_time < auction.expires; ties go to the earlier bid, then the
  lower bidder id. Auctions without such a bid have no winner.
- Averages (Q4, Q6) are integers rounded half up (Beam: Math.round(total / count)), computed
  exactly as (2·total + count) // (2·count).
- Q4 is unwindowed (the original NEXMark Q4 and Flink's q4): the average over all closed auctions
  of a category. Beam's model windows it; a running average per category is what a job updates.
- Q6 averages a seller's last 10 closed auctions in the order they close (expires, then auction
  id). Beam's model orders by the winning bid's time; closing order is what "last 10 closed
  auctions" says and what a watermark-driven job sees.
- Q3 joins without expiry (Beam's model; its streaming version drops persons after 600 s).
- Q8 adds the auction id to Beam's (person id, name, reserve) so each row names its join pair.

How to compare with a job's deduplicated output (`diff` does it): Q1, Q2 as multisets of rows
(bids have no id of their own); Q3 as a set keyed by auction id; Q4 final value per category;
Q5, Q7 the set of rows per window; Q6 final value per seller; Q8 the set of rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from bench.nexmark.model import Auction, Bid, Event, Person

WINDOW_SIZE_MS = 10_000
WINDOW_PERIOD_MS = 5_000
AUCTION_SKIP = 123
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
Q6_LAST = 10

Row = dict[str, Any]


def _split(events: Iterable[Event]) -> tuple[list[Person], list[Auction], list[Bid]]:
    persons: list[Person] = []
    auctions: list[Auction] = []
    bids: list[Bid] = []
    for e in events:
        if isinstance(e, Bid):
            bids.append(e)
        elif isinstance(e, Auction):
            auctions.append(e)
        elif isinstance(e, Person):
            persons.append(e)
        else:
            raise TypeError(f"not a NEXMark event: {e!r}")
    return persons, auctions, bids


def _sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: tuple(r.values()))


def round_avg(total: int, count: int) -> int:
    """total / count rounded half up, exactly (Java's Math.round of the double, without its error)."""
    return (2 * total + count) // (2 * count)


def _windows_of(ts: int, size: int, period: int) -> range:
    """Starts of the windows [s, s + size), s a multiple of period, that contain ts."""
    last = ts - ts % period
    return range(last, ts - size, -period)


def q1(events: Iterable[Event]) -> list[Row]:
    """Currency conversion: every bid with its price in euro cents (Beam: price * 89 / 100)."""
    _, _, bids = _split(events)
    return _sorted([{"auction": b.auction, "bidder": b.bidder, "price": b.price * 89 // 100,
                     "date_time": b.date_time} for b in bids])


def q2(events: Iterable[Event], auction_skip: int = AUCTION_SKIP) -> list[Row]:
    """Selection: bids on every auction_skip-th auction id."""
    _, _, bids = _split(events)
    return _sorted([{"auction": b.auction, "price": b.price} for b in bids if b.auction % auction_skip == 0])


def q3(events: Iterable[Event]) -> list[Row]:
    """Local item suggestion: sellers in OR/ID/CA of category-10 auctions (person ⋈ auction)."""
    persons, auctions, _ = _split(events)
    local = {p.id: p for p in persons if p.state in Q3_STATES}
    rows = [{"name": p.name, "city": p.city, "state": p.state, "id": a.id}
            for a in auctions if a.category == Q3_CATEGORY and (p := local.get(a.seller)) is not None]
    return sorted(rows, key=lambda r: r["id"])


def winning_bids(events: Iterable[Event], until_ms: int | None = None) -> list[tuple[Auction, Bid]]:
    """(auction, winning bid) of every closed auction that has one, in closing order."""
    _, auctions, bids = _split(events)
    closed = {a.id: a for a in auctions if until_ms is None or a.expires <= until_ms}
    best: dict[int, Bid] = {}
    for b in bids:
        a = closed.get(b.auction)
        if a is None or b.price < a.reserve or not a.date_time <= b.date_time < a.expires:
            continue
        cur = best.get(a.id)
        if cur is None or (-b.price, b.date_time, b.bidder) < (-cur.price, cur.date_time, cur.bidder):
            best[a.id] = b
    return sorted(((closed[i], b) for i, b in best.items()), key=lambda ab: (ab[0].expires, ab[0].id))


def q4(events: Iterable[Event], until_ms: int | None = None) -> list[Row]:
    """Average winning price per category over all closed auctions."""
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for a, b in winning_bids(events, until_ms):
        t = totals[a.category]
        t[0] += b.price
        t[1] += 1
    return [{"category": c, "avg_price": round_avg(s, n), "count": n} for c, (s, n) in sorted(totals.items())]


def q5(events: Iterable[Event], until_ms: int | None = None, size_ms: int = WINDOW_SIZE_MS,
       period_ms: int = WINDOW_PERIOD_MS) -> list[Row]:
    """Hot items: per sliding window, the auction(s) with the most bids (all ties)."""
    if size_ms <= 0 or period_ms <= 0 or size_ms % period_ms:
        raise ValueError(f"window size {size_ms} ms must be a positive multiple of the period {period_ms} ms")
    _, _, bids = _split(events)
    counts: dict[int, Counter[int]] = defaultdict(Counter)
    for b in bids:
        for start in _windows_of(b.date_time, size_ms, period_ms):
            counts[start][b.auction] += 1
    rows = []
    for start, c in counts.items():
        if until_ms is not None and start + size_ms > until_ms:
            continue
        top = max(c.values())
        rows += [{"window_start": start, "window_end": start + size_ms, "auction": a, "count": n}
                 for a, n in c.items() if n == top]
    return _sorted(rows)


def q6(events: Iterable[Event], until_ms: int | None = None, last: int = Q6_LAST) -> list[Row]:
    """Average selling price per seller over their last `last` closed auctions with a winner."""
    per_seller: dict[int, list[int]] = defaultdict(list)
    for a, b in winning_bids(events, until_ms):
        per_seller[a.seller].append(b.price)
    rows = []
    for seller, prices in sorted(per_seller.items()):
        tail = prices[-last:]
        rows.append({"seller": seller, "avg_price": round_avg(sum(tail), len(tail)), "count": len(tail)})
    return rows


def q7(events: Iterable[Event], until_ms: int | None = None, size_ms: int = WINDOW_SIZE_MS) -> list[Row]:
    """Highest bid: per tumbling window, the bid(s) with the highest price (all ties)."""
    _, _, bids = _split(events)
    per_window: dict[int, list[Bid]] = defaultdict(list)
    for b in bids:
        per_window[b.date_time - b.date_time % size_ms].append(b)
    rows = []
    for start, bs in per_window.items():
        if until_ms is not None and start + size_ms > until_ms:
            continue
        top = max(b.price for b in bs)
        rows += [{"window_start": start, "window_end": start + size_ms, "auction": b.auction, "bidder": b.bidder,
                  "price": b.price, "date_time": b.date_time} for b in bs if b.price == top]
    return _sorted(rows)


def q8(events: Iterable[Event], until_ms: int | None = None, size_ms: int = WINDOW_SIZE_MS) -> list[Row]:
    """Monitor new users: persons who opened an auction in the tumbling window they registered in."""
    persons, auctions, _ = _split(events)
    by_window = {(p.date_time - p.date_time % size_ms, p.id): p for p in persons}
    rows = []
    for a in auctions:
        start = a.date_time - a.date_time % size_ms
        p = by_window.get((start, a.seller))
        if p is None or (until_ms is not None and start + size_ms > until_ms):
            continue
        rows.append({"window_start": start, "window_end": start + size_ms, "id": p.id, "name": p.name,
                     "reserve": a.reserve, "auction": a.id})
    return _sorted(rows)


QUERIES = {"q1": q1, "q2": q2, "q3": q3, "q4": q4, "q5": q5, "q6": q6, "q7": q7, "q8": q8}
_FINAL_KEY = {"q4": "category", "q6": "seller"}


def canonical(query: str, rows: Iterable[Row]) -> Any:
    """The comparable form of a query's rows (see the module docstring for the rule per query)."""
    rows = list(rows)
    if query in ("q1", "q2"):
        return Counter(tuple(sorted(r.items())) for r in rows)
    if query in _FINAL_KEY:
        key = _FINAL_KEY[query]
        out: dict[Any, Row] = {}
        for r in rows:  # a job's updates in emission order: the last one per key is final
            out[r[key]] = r
        return out
    if query in ("q5", "q7"):
        per: dict[int, set[tuple[Any, ...]]] = defaultdict(set)
        for r in rows:
            per[r["window_start"]].add(tuple(sorted(r.items())))
        return dict(per)
    if query in ("q3", "q8"):
        return {tuple(sorted(r.items())) for r in rows}
    raise ValueError(f"unknown query {query!r}; expected one of {sorted(QUERIES)}")


def diff(query: str, expected: Iterable[Row], actual: Iterable[Row], limit: int = 5) -> str | None:
    """None if `actual` (a job's deduplicated output) matches the reference, else what differs."""
    e, a = canonical(query, expected), canonical(query, actual)
    if e == a:
        return None
    if isinstance(e, Counter):
        missing, extra = list((e - a).elements()), list((a - e).elements())
    elif isinstance(e, set):
        missing, extra = sorted(e - a), sorted(a - e)
    else:
        missing = [(k, e[k]) for k in sorted(e) if k not in a or a[k] != e[k]]
        extra = [(k, a[k]) for k in sorted(a) if k not in e or a[k] != e[k]]
    return (f"{query}: {len(missing)} expected rows missing or different, e.g. {missing[:limit]}; "
            f"{len(extra)} unexpected, e.g. {extra[:limit]}")
