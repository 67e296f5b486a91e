"""Deterministic NEXMark event generator, derived the way Beam's `sources/generator` derives it.

Event number n (0, 1, 2, ...) fixes everything about event n without any state: its kind (n mod 50:
0 person, 1-3 auction, 4-49 bid), its ids (person/auction ids count up with n; bids and auctions
pick "hot" or recent sellers, bidders and auctions from n alone), its event time
(`NexmarkConfig.event_time_ms(n)`) and its random fields (a `java.util.Random` per event, as in Beam, seeded
from (seed, n)).
So any slice of the stream can be regenerated, and the same config always gives the same events.

Out-of-order delivery: event n gets a delivery key n + u·D (u uniform in [0, 1) from a seeded
stream, D = `max_disorder`) and events are delivered in key order. Every event m >= n + D then
comes after n and every m <= n - D before it, so event n is delivered at a position within n ± D.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from typing import NamedTuple

from bench.nexmark.jrandom import JavaRandom
from bench.nexmark.model import (
    AUCTION_PROPORTION,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
    Auction,
    Bid,
    Event,
    NexmarkConfig,
    Person,
)

# Beam PersonGenerator / AuctionGenerator / BidGenerator constants
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10
HOT_SELLER_RATIO = 100
HOT_AUCTION_RATIO = 100
HOT_BIDDER_RATIO = 100
NUM_CATEGORIES = 5
US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
             "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
_MIN_STRING_LENGTH = 3
_SEED_MIX = 0x9E3779B97F4A7C15
_M64 = (1 << 64) - 1
_DISORDER_SALT = 0x6E65786D61726B


def kind_of_number(n: int) -> str:
    rem = n % PROPORTION_DENOMINATOR
    if rem < PERSON_PROPORTION:
        return "person"
    return "auction" if rem < PERSON_PROPORTION + AUCTION_PROPORTION else "bid"


def last_base0_person_id(n: int) -> int:
    """Id (from 0) of the last person generated at or before event n."""
    epoch, offset = divmod(n, PROPORTION_DENOMINATOR)
    if offset >= PERSON_PROPORTION:
        offset = PERSON_PROPORTION - 1
    return epoch * PERSON_PROPORTION + offset


def last_base0_auction_id(n: int) -> int:
    """Id (from 0) of the last auction generated at or before event n (-1 before the first)."""
    epoch, offset = divmod(n, PROPORTION_DENOMINATOR)
    if offset < PERSON_PROPORTION:
        epoch -= 1
        offset = AUCTION_PROPORTION - 1
    elif offset >= PERSON_PROPORTION + AUCTION_PROPORTION:
        offset = AUCTION_PROPORTION - 1
    else:
        offset -= PERSON_PROPORTION
    return epoch * AUCTION_PROPORTION + offset


def _next_long(rnd: JavaRandom, n: int) -> int:
    if n >= (1 << 31) - 1:
        raise ValueError(f"id range {n} exceeds Java int; lower num_active_people / num_in_flight_auctions")
    return rnd.next_int(n)


def next_base0_person_id(n: int, rnd: JavaRandom, cfg: NexmarkConfig) -> int:
    """A random active person, or one of the next PERSON_ID_LEAD not yet generated (as in Beam)."""
    num_people = last_base0_person_id(n) + 1
    active = min(num_people, cfg.num_active_people)
    return num_people - active + _next_long(rnd, active + PERSON_ID_LEAD)


def next_base0_auction_id(n: int, rnd: JavaRandom, cfg: NexmarkConfig) -> int:
    """A random auction likely still in flight, or one of the next AUCTION_ID_LEAD (as in Beam)."""
    max_auction = last_base0_auction_id(n)
    min_auction = max(max_auction - cfg.num_in_flight_auctions, 0)
    return min_auction + _next_long(rnd, max_auction - min_auction + 1 + AUCTION_ID_LEAD)


def next_price(rnd: JavaRandom) -> int:
    """Cents, log-uniform between $1 and $1M (Java's Math.round)."""
    return int(math.floor(10.0 ** (rnd.next_double() * 6.0) * 100.0 + 0.5))


def next_string(rnd: JavaRandom, max_length: int) -> str:
    length = _MIN_STRING_LENGTH + rnd.next_int(max_length - _MIN_STRING_LENGTH)
    ni = rnd.next_int
    return "".join(" " if ni(13) == 0 else chr(97 + ni(26)) for _ in range(length)).strip(" ")


# base-26 digit triples, lowest digit first: Java's 'a' + rnd % 26 with rnd /= 26, for rnd >= 0 and
# rnd < 0 (Java's remainder keeps the sign, so negative ints give the characters below 'a')
_TRIPLES_POS = tuple(chr(97 + v % 26) + chr(97 + v // 26 % 26) + chr(97 + v // 676) for v in range(17576))
_TRIPLES_NEG = tuple(chr(97 - v % 26) + chr(97 - v // 26 % 26) + chr(97 - v // 676) for v in range(17576))


def next_exact_string(rnd: JavaRandom, length: int) -> str:
    """Beam's nextExactString: six characters from each random int."""
    out = []
    for r in rnd.next_ints((length + 5) // 6):
        table = _TRIPLES_POS if r >= 0 else _TRIPLES_NEG
        a = -r if r < 0 else r
        out.append(table[a % 17576] + table[a // 17576 % 17576])
    return "".join(out)[:length]


def next_extra(rnd: JavaRandom, current_size: int, desired_average: int) -> str:
    """Padding so that a record is `desired_average` bytes on average."""
    if current_size > desired_average:
        return ""
    desired_average -= current_size
    delta = math.floor(desired_average * 0.2 + 0.5)
    size = desired_average - delta + (0 if delta == 0 else rnd.next_int(2 * delta))
    return next_exact_string(rnd, size)


def _rng(n: int, cfg: NexmarkConfig) -> JavaRandom:
    """Event n's RNG. Beam seeds java.util.Random with n itself; the first draws of consecutive
    seeds are correlated (its hot/cold choices then come in runs of thousands of events), so the
    seed here is splitmix64 of (seed, n): same fields' derivation, independent draws."""
    z = (n + (cfg.seed + 1) * _SEED_MIX) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return JavaRandom(z ^ (z >> 31))


def _person(n: int, rnd: JavaRandom, ts: int, cfg: NexmarkConfig) -> Person:
    pid = last_base0_person_id(n) + FIRST_PERSON_ID
    name = FIRST_NAMES[rnd.next_int(len(FIRST_NAMES))] + " " + LAST_NAMES[rnd.next_int(len(LAST_NAMES))]
    email = next_string(rnd, 7) + "@" + next_string(rnd, 5) + ".com"
    card = " ".join(f"{rnd.next_int(10000):04d}" for _ in range(4))
    city = US_CITIES[rnd.next_int(len(US_CITIES))]
    state = US_STATES[rnd.next_int(len(US_STATES))]
    size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
    return Person(pid, name, email, card, city, state, ts, next_extra(rnd, size, cfg.avg_person_bytes))


def _auction(n: int, rnd: JavaRandom, ts: int, cfg: NexmarkConfig) -> Auction:
    aid = last_base0_auction_id(n) + FIRST_AUCTION_ID
    if rnd.next_int(cfg.hot_sellers_ratio) > 0:  # a hot seller: first of the last HOT_SELLER_RATIO people
        seller = (last_base0_person_id(n) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
    else:
        seller = next_base0_person_id(n, rnd, cfg)
    category = FIRST_CATEGORY_ID + rnd.next_int(NUM_CATEGORIES)
    initial_bid = next_price(rnd)
    # average length: the time until num_in_flight_auctions more auctions have been created
    ahead = (cfg.num_in_flight_auctions * PROPORTION_DENOMINATOR) // AUCTION_PROPORTION
    horizon_ms = cfg.event_time_ms(n + ahead) - ts
    expires = ts + 1 + _next_long(rnd, max(horizon_ms * 2, 1))
    item_name = next_string(rnd, 20)
    description = next_string(rnd, 100)
    reserve = initial_bid + next_price(rnd)
    size = 8 + len(item_name) + len(description) + 40
    return Auction(aid, item_name, description, initial_bid, reserve, ts, expires, seller + FIRST_PERSON_ID,
                   category, next_extra(rnd, size, cfg.avg_auction_bytes))


def _bid(n: int, rnd: JavaRandom, ts: int, cfg: NexmarkConfig) -> Bid:
    if rnd.next_int(cfg.hot_auction_ratio) > 0:  # a hot auction: first of the last HOT_AUCTION_RATIO
        auction = (last_base0_auction_id(n) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
    else:
        auction = next_base0_auction_id(n, rnd, cfg)
    if rnd.next_int(cfg.hot_bidders_ratio) > 0:  # the second of the last HOT_BIDDER_RATIO people
        bidder = (last_base0_person_id(n) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1
    else:
        bidder = next_base0_person_id(n, rnd, cfg)
    price = next_price(rnd)
    return Bid(auction + FIRST_AUCTION_ID, bidder + FIRST_PERSON_ID, price, ts, next_extra(rnd, 32, cfg.avg_bid_bytes))


def event(n: int, cfg: NexmarkConfig) -> Event:
    """Event number n (a pure function of n and the config)."""
    if n < 0:
        raise ValueError(f"event numbers start at 0, got {n}")
    rnd = _rng(n, cfg)
    ts = cfg.event_time_ms(n)
    rem = n % PROPORTION_DENOMINATOR
    if rem < PERSON_PROPORTION:
        return _person(n, rnd, ts, cfg)
    if rem < PERSON_PROPORTION + AUCTION_PROPORTION:
        return _auction(n, rnd, ts, cfg)
    return _bid(n, rnd, ts, cfg)


class Delivered(NamedTuple):
    """One event as delivered: its delivery position (the writer's record index) and event number."""

    position: int
    number: int
    event: Event


def deliveries(cfg: NexmarkConfig, count: int | None = None) -> Iterator[Delivered]:
    """Events 0..count-1 (unbounded if None) in delivery order: positions 0, 1, 2, ... in turn."""
    if count is not None and count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    d = cfg.max_disorder
    jitter = random.Random(cfg.seed ^ _DISORDER_SALT).random
    heap: list[tuple[float, int]] = []
    position = 0
    n = 0
    while count is None or n < count:
        heapq.heappush(heap, (n + jitter() * d if d else float(n), n))
        n += 1
        while heap and heap[0][0] < n:  # every event not yet generated has a key >= n
            _, m = heapq.heappop(heap)
            yield Delivered(position, m, event(m, cfg))
            position += 1
    while heap:
        _, m = heapq.heappop(heap)
        yield Delivered(position, m, event(m, cfg))
        position += 1


def delivery_numbers(cfg: NexmarkConfig, count: int) -> list[int]:
    """The event number at each delivery position 0..count-1, without generating the events.

    The same order as `deliveries` (the same jitter stream, ordered by (n + u·D, n)), for a
    benchmark that maps a Kafka offset back to its scheduled time on millions of events."""
    d = cfg.max_disorder
    if not d:
        return list(range(count))
    jitter = random.Random(cfg.seed ^ _DISORDER_SALT).random
    keys = [n + jitter() * d for n in range(count)]
    return sorted(range(count), key=lambda n: (keys[n], n))


def events(cfg: NexmarkConfig, count: int) -> list[Event]:
    """The first `count` events in delivery order."""
    return [d.event for d in deliveries(cfg, count)]
