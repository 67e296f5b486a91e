"""NEXMark generator: Java's RNG, the 1:3:46 mix, ids as Beam derives them, determinism, bounded disorder."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.nexmark.generator import (
    AUCTION_ID_LEAD,
    PERSON_ID_LEAD,
    deliveries,
    event,
    events,
    kind_of_number,
    last_base0_auction_id,
    last_base0_person_id,
)
from bench.nexmark.jrandom import JavaRandom
from bench.nexmark.model import Auction, Bid, NexmarkConfig, Person, from_json, kind_of, to_json

pytestmark = pytest.mark.bench


def test_java_random_matches_java() -> None:
    # printed by OpenJDK 17's java.util.Random: new Random(0), then per round nextInt(100),
    # nextInt(13), nextInt(10000), nextInt(), nextDouble(), nextInt(1 << 20), nextInt(1073741825)
    want = [60, 5, 8029, -1690734402, 0.6374174253501083, 577175, 251269761,
            19, 3, 1077, 1085665355, 0.3851891847407185, 1032681, 49567875]
    r = JavaRandom(0)
    got = []
    for _ in range(2):
        got += [r.next_int(100), r.next_int(13), r.next_int(10000), r.next_int(), r.next_double(),
                r.next_int(1 << 20), r.next_int(1073741825)]
    assert got == want
    r1 = JavaRandom(1)
    assert [r1.next_int(100), r1.next_int(13), r1.next_int(10000), r1.next_int()] == [85, 0, 1847, 1749940626]
    r5 = JavaRandom(5)
    assert JavaRandom(5).next_ints(40) == [r5.next_int() for _ in range(40)]
    with pytest.raises(ValueError):
        JavaRandom(0).next_int(0)


def test_proportions_1_3_46() -> None:
    cfg = NexmarkConfig(max_disorder=20)
    evs = events(cfg, 50 * 400)
    assert Counter(kind_of(e) for e in evs) == {"person": 400, "auction": 1200, "bid": 18400}
    for block in range(0, 1000, 50):  # and in every block of 50 event numbers
        assert Counter(kind_of_number(n) for n in range(block, block + 50)) == {"person": 1, "auction": 3, "bid": 46}


def test_deterministic_for_a_seed_and_regenerable_by_number() -> None:
    cfg = NexmarkConfig(seed=7, max_disorder=30)
    a, b = list(deliveries(cfg, 3000)), list(deliveries(cfg, 3000))
    assert a == b
    assert all(d.event == event(d.number, cfg) for d in a[::97])
    other = events(NexmarkConfig(seed=8, max_disorder=30), 3000)
    assert other != [d.event for d in a]
    # same ids and times (they derive from the event number), different random fields
    assert [kind_of(e) for e in sorted(other, key=lambda e: e.date_time)][:50] == \
        [kind_of(e) for e in sorted((d.event for d in a), key=lambda e: e.date_time)][:50]


def test_a_later_base_time_shifts_every_time_field_and_nothing_else() -> None:
    # the writer's --pregenerate relies on it: events are generated at base 0 and shifted when sent
    base, at_zero = NexmarkConfig(seed=2), NexmarkConfig(seed=2, base_time_ms=0)
    for n in range(0, 400, 3):
        e, z = event(n, base), event(n, at_zero)
        shifted = {k: v + base.base_time_ms if k in ("date_time", "expires") else v for k, v in vars(z).items()}
        assert vars(e) == shifted


def test_disorder_is_bounded() -> None:
    d_max = 37
    cfg = NexmarkConfig(rate=2000, max_disorder=d_max)
    ds = list(deliveries(cfg, 20000))
    assert [d.position for d in ds] == list(range(20000))
    assert sorted(d.number for d in ds) == list(range(20000))
    displacement = [abs(d.position - d.number) for d in ds]
    assert max(displacement) <= d_max
    assert max(displacement) >= d_max // 2  # it really is out of order
    inversions = sum(1 for x, y in zip(ds, ds[1:], strict=False) if y.event.date_time < x.event.date_time)
    assert inversions > 1000
    # in time: an event is delivered at most max_disorder / rate early or late
    bound_ms = d_max * cfg.inter_event_delay_us / 1000 + 1
    for d in ds:
        scheduled_ms = cfg.base_time_ms + d.position * cfg.inter_event_delay_us / 1000
        assert abs(d.event.date_time - scheduled_ms) <= bound_ms
    in_order = list(deliveries(NexmarkConfig(max_disorder=0), 2000))
    assert all(d.position == d.number for d in in_order)


def test_event_time_advances_at_the_rate() -> None:
    cfg = NexmarkConfig(rate=500)
    assert [event(n, cfg).date_time - cfg.base_time_ms for n in (0, 1, 2, 500, 1000)] == [0, 2, 4, 1000, 2000]


def test_ids_as_beam_derives_them() -> None:
    n_events = 30000
    cfg = NexmarkConfig(max_disorder=50)
    by_number = {d.number: d.event for d in deliveries(cfg, n_events)}
    persons = [by_number[n] for n in sorted(by_number) if isinstance(by_number[n], Person)]
    auctions = [by_number[n] for n in sorted(by_number) if isinstance(by_number[n], Auction)]
    assert [p.id for p in persons] == list(range(1000, 1000 + len(persons)))
    assert [a.id for a in auctions] == list(range(1000, 1000 + len(auctions)))
    person_ids, auction_ids = {p.id for p in persons}, {a.id for a in auctions}
    hot_auction = hot_bidder = n_bids = 0
    for n, e in by_number.items():
        last_person = last_base0_person_id(n) + 1000
        if isinstance(e, Auction):
            assert 1000 <= e.seller <= last_person + PERSON_ID_LEAD
            assert 10 <= e.category <= 14 and e.expires > e.date_time and e.reserve > e.initial_bid > 0
        elif isinstance(e, Bid):
            n_bids += 1
            # a bid names an auction/person already generated, or one of the next few (Beam's leads)
            assert 1000 <= e.auction <= last_base0_auction_id(n) + 1000 + AUCTION_ID_LEAD
            assert 1000 <= e.bidder <= last_person + PERSON_ID_LEAD
            if n < n_events - 50 * PERSON_ID_LEAD:  # their leads are generated before the stream ends
                assert e.auction in auction_ids and e.bidder in person_ids
            hot_auction += e.auction % 100 == 0
            hot_bidder += (e.bidder - 1000) % 100 == 1
            assert e.price > 0
    # hot ratios 2 and 4: half the bids on the hot auction, three quarters by the hot bidder
    assert 0.45 < hot_auction / n_bids < 0.58
    assert 0.70 < hot_bidder / n_bids < 0.80


def test_record_sizes_follow_the_configured_averages() -> None:
    evs = events(NexmarkConfig(), 5000)
    bids = [len(to_json(e)) for e in evs if isinstance(e, Bid)]
    assert 150 < sum(bids) / len(bids) < 200  # 100 "idealised" bytes + JSON field names
    bare = events(NexmarkConfig(avg_bid_bytes=0, avg_auction_bytes=0, avg_person_bytes=0), 200)
    assert all(e.extra == "" for e in bare)


def test_json_round_trip_and_clear_errors() -> None:
    for e in events(NexmarkConfig(), 60):
        assert from_json(kind_of(e), to_json(e)) == e
    with pytest.raises(ValueError, match="unknown NEXMark kind"):
        from_json("item", b"{}")
    with pytest.raises(ValueError, match="expected"):
        from_json("bid", b'{"auction": 1}')
    with pytest.raises(ValueError, match="rate"):
        NexmarkConfig(rate=0)
    with pytest.raises(ValueError, match="max_disorder"):
        NexmarkConfig(max_disorder=-1)
    with pytest.raises(ValueError, match="unknown NEXMark config"):
        NexmarkConfig.from_dict({"rate": 10, "speed": 2})
