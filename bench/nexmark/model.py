"""The NEXMark records and the generator's configuration.

Field meanings follow Beam's `nexmark.model` (Person, Auction, Bid), in snake_case so that they
are Spark column names as they stand. Times are milliseconds since the Unix epoch (event time);
prices are in cents. The JSON written to Kafka is exactly `asdict(record)`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

KINDS = ("person", "auction", "bid")

# Beam GeneratorConfig: proportions per 50 events, first ids, first category
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
PROPORTION_DENOMINATOR = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10


@dataclass(frozen=True)
class Person:
    id: int
    name: str
    email_address: str
    credit_card: str
    city: str
    state: str
    date_time: int
    extra: str


@dataclass(frozen=True)
class Auction:
    id: int
    item_name: str
    description: str
    initial_bid: int
    reserve: int
    date_time: int
    expires: int
    seller: int
    category: int
    extra: str


@dataclass(frozen=True)
class Bid:
    auction: int
    bidder: int
    price: int
    date_time: int
    extra: str


Event = Person | Auction | Bid
_BY_KIND: dict[str, type] = {"person": Person, "auction": Auction, "bid": Bid}


def kind_of(event: Event) -> str:
    """'person', 'auction' or 'bid'."""
    if isinstance(event, Bid):
        return "bid"
    if isinstance(event, Auction):
        return "auction"
    if isinstance(event, Person):
        return "person"
    raise TypeError(f"not a NEXMark event: {event!r}")


def key_of(event: Event) -> int:
    """The Kafka key: the id the queries join on first (person id, auction id, a bid's auction)."""
    return event.auction if isinstance(event, Bid) else event.id


def to_json(event: Event) -> bytes:
    # vars(), not asdict(): the fields are flat, and asdict's deep copy is the writer's hot path
    return json.dumps(vars(event), separators=(",", ":")).encode()


def from_json(kind: str, value: bytes | str | dict[str, Any]) -> Event:
    """Parse one Kafka value of topic kind `kind` back into its record."""
    cls = _BY_KIND.get(kind)
    if cls is None:
        raise ValueError(f"unknown NEXMark kind {kind!r}; expected one of {KINDS}")
    d = value if isinstance(value, dict) else json.loads(value)
    names = {f.name for f in fields(cls)}
    if set(d) != names:
        raise ValueError(f"{kind} record has fields {sorted(d)}, expected {sorted(names)}")
    event: Event = cls(**d)
    return event


@dataclass(frozen=True)
class NexmarkConfig:
    """What the generator derives events from (Beam NexmarkConfiguration defaults where they apply).

    `rate` is events per second of event time; the writer sends at the same rate, so event time
    and scheduled time advance together. `max_disorder` bounds out-of-order delivery in events:
    the event with number n is delivered at a position within n ± max_disorder, i.e. at most
    max_disorder / rate seconds early or late.
    """

    rate: float = 1000.0
    base_time_ms: int = 1_767_225_600_000  # 2026-01-01T00:00:00Z: fixed, so runs are reproducible
    seed: int = 0
    max_disorder: int = 0
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    avg_person_bytes: int = 200
    avg_auction_bytes: int = 500
    avg_bid_bytes: int = 100

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 events/s, got {self.rate}")
        if self.inter_event_delay_us < 1:
            raise ValueError(f"rate {self.rate} is above 1e6 events/s; use a lower rate")
        if self.max_disorder < 0:
            raise ValueError(f"max_disorder must be >= 0 events, got {self.max_disorder}")
        for name in ("num_in_flight_auctions", "num_active_people", "hot_auction_ratio", "hot_sellers_ratio",
                     "hot_bidders_ratio"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("avg_person_bytes", "avg_auction_bytes", "avg_bid_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0 (0: no padding), got {getattr(self, name)}")

    @property
    def inter_event_delay_us(self) -> int:
        return int(round(1e6 / self.rate))

    def event_time_ms(self, n: int) -> int:
        """Event time of event number n (Beam: baseTime + n * interEventDelayUs / 1000)."""
        return self.base_time_ms + (n * self.inter_event_delay_us) // 1000

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NexmarkConfig:
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown NEXMark config fields {sorted(unknown)}")
        return cls(**d)
