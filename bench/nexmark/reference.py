"""Reference answers to NEXMark Q1-Q8 in pure Python, for checking a streaming job's output.

Every function takes the events a job read (any order: the answers depend on event times, not on
delivery order) and returns rows as dicts, sorted (Q4, Q6: their updates in the order they are
made). Semantics follow Beam's `queries/Query*Model` and the original NEXMark query statements;
where they leave a choice, it is made here:

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
- Q5 and Q7 answer every tie: all auctions with the window's top bid count, all bids at the
  window's top price ("the bids with the highest bid price": Beam's Query7 keeps every bid at the
  window's max price, Flink's q7 joins the max back to the bids; Beam's Query7Model simulator
  alone keeps only the last bid of a tie).
- Q3 joins without expiry (Beam's model; its streaming version drops persons after 600 s).
- Q8 adds the auction id to Beam's (person id, name, reserve) so each row names its join pair.

How a job's deduplicated output is compared (`diff`): for every query as a multiset of rows
(`canonical`), so a missing row, an extra row and a row emitted twice all fail. Q1-Q3, Q5, Q7
and Q8 emit each answer row once, whatever the batches: their rows are a function of the events.

Q4 and Q6 are continuous aggregations: the second operator of the chain (`CategoryAverage`,
`SellerAverage`) emits its key's new value every time it reads winners of that key, and every
such update is an answer row. Which updates exist depends on how the winners were cut into the
second operator's epochs, and that cut is not a function of the events: it depends on when the
first operator's outputs land in the hand-off topic relative to the second operator's triggers
(two partitions, two upstream workers, a replay after a kill). So the exact multiset is computed
from the run's own cut: `q4_updates(batches)` / `q6_updates(batches)` give exactly what the
operator emits when it reads those batches of winners in that order (one row per key a batch
touches), and the test takes the batches from the second operator's Spark offset log and the
deduplicated hand-off topic. What does not depend on the cut is checked against the events: the
first operator's output is exactly `winners(events)` (a multiset), the batches together hold
exactly those winners, and the last update per key (`last_per_key`) is the key's answer over all
closed auctions. `q4(events)` and `q6(events)` are the full changelog: one update per winner,
each read alone, in closing order; their last row per key is the final answer.
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


def winners(events: Iterable[Event], until_ms: int | None = None) -> list[Row]:
    """Q4/Q6's first operator (`WinningBids`): one row per closed auction with a winner, in closing order."""
    return [{"auction": a.id, "seller": a.seller, "category": a.category, "expires": a.expires, "price": b.price,
             "bidder": b.bidder, "date_time": b.date_time} for a, b in winning_bids(events, until_ms)]


def _one_at_a_time(events: Iterable[Event], until_ms: int | None) -> list[list[Row]]:
    return [[w] for w in winners(events, until_ms)]


def q4_updates(batches: Iterable[Iterable[Row]]) -> list[Row]:
    """What `CategoryAverage` emits reading these batches of winners (rows of `winners`), in order:
    per batch, one row per category it has winners of, the average over all that category's winners
    read so far (the order inside a batch does not matter)."""
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    rows = []
    for batch in batches:
        touched = set()
        for w in batch:
            t = totals[w["category"]]
            t[0] += w["price"]
            t[1] += 1
            touched.add(w["category"])
        rows += [{"category": c, "avg_price": round_avg(*totals[c]), "count": totals[c][1]} for c in sorted(touched)]
    return rows


def q4(events: Iterable[Event], until_ms: int | None = None) -> list[Row]:
    """Average winning price per category over the closed auctions, updated at every one in
    closing order (the full changelog); the last row of a category is its answer."""
    return q4_updates(_one_at_a_time(events, until_ms))


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


def q6_updates(batches: Iterable[Iterable[Row]], last: int = Q6_LAST) -> list[Row]:
    """What `SellerAverage` emits reading these batches of winners, in order: per batch, one row per
    seller it has winners of, the average of the seller's last `last` winners read so far in closing
    order (expires, auction id) — a winner read late still takes its place in that order."""
    kept: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    rows = []
    for batch in batches:
        touched = set()
        for w in batch:
            kept[w["seller"]].append((w["expires"], w["auction"], w["price"]))
            touched.add(w["seller"])
        for s in sorted(touched):
            kept[s] = sorted(kept[s])[-last:]
            prices = [p for _, _, p in kept[s]]
            rows.append({"seller": s, "avg_price": round_avg(sum(prices), len(prices)), "count": len(prices)})
    return rows


def q6(events: Iterable[Event], until_ms: int | None = None, last: int = Q6_LAST) -> list[Row]:
    """Average selling price per seller over their last `last` closed auctions with a winner,
    updated at every one in closing order (the full changelog); the last row of a seller is its answer."""
    return q6_updates(_one_at_a_time(events, until_ms), last)


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
#: the continuous aggregations: every update is an answer row; the last one per key is final
UPDATE_KEY = {"q4": "category", "q6": "seller"}
#: what `canonical` and `diff` compare: the queries' rows, and the rows Q4/Q6's first operator hands on
ROW_KINDS = (*QUERIES, "winners")


def canonical(query: str, rows: Iterable[Row]) -> Counter[tuple[tuple[str, Any], ...]]:
    """The comparable form of a query's rows: the multiset of rows (module docstring)."""
    if query not in ROW_KINDS:
        raise ValueError(f"unknown query {query!r}; expected one of {list(ROW_KINDS)}")
    return Counter(tuple(sorted(r.items())) for r in rows)


def last_per_key(query: str, rows: Iterable[Row]) -> list[Row]:
    """Q4/Q6: the last update per key of rows in emission order (a job's: in epoch order), by key."""
    key = UPDATE_KEY[query]
    out: dict[Any, Row] = {}
    for r in rows:
        out[r[key]] = r
    return [out[k] for k in sorted(out)]


def diff(query: str, expected: Iterable[Row], actual: Iterable[Row], limit: int = 5) -> str | None:
    """None if `actual` (a job's deduplicated output) is the multiset `expected`, else what differs:
    rows missing (or emitted fewer times than expected) and rows unexpected (or emitted too often)."""
    e, a = canonical(query, expected), canonical(query, actual)
    if e == a:
        return None
    missing, extra = sorted((e - a).elements()), sorted((a - e).elements())
    return (f"{query}: {len(missing)} expected rows missing, e.g. {[dict(r) for r in missing[:limit]]}; "
            f"{len(extra)} unexpected (or repeated), e.g. {[dict(r) for r in extra[:limit]]} "
            f"({sum(e.values())} expected, {sum(a.values())} actual rows)")
