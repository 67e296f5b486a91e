"""The offset → scheduled-time mapping the NEXMark benchmark's latencies rest on (no Kafka, no
Spark): every record the writer would send, checked against the generator's delivery order."""

from __future__ import annotations

import math

import pytest

from bench.nexmark.generator import deliveries, delivery_numbers
from bench.nexmark.model import NexmarkConfig, kind_of
from bench.nexmark.writer import NexmarkSchedule, OffsetClock, topics

pytestmark = pytest.mark.bench


@pytest.mark.parametrize("disorder", [0, 37])
def test_delivery_numbers_are_the_deliveries_order(disorder: int) -> None:
    cfg = NexmarkConfig(rate=500.0, seed=3, max_disorder=disorder)
    assert delivery_numbers(cfg, 2000) == [d.number for d in deliveries(cfg, 2000)]


def test_offset_clock_gives_each_records_scheduled_time() -> None:
    """The k-th record of a kind sits at partition k mod P, offset base + k div P, and is due at
    its delivery position's time: every record the writer would send, checked one by one."""
    cfg = NexmarkConfig(rate=500.0, seed=3, max_disorder=37)
    s = NexmarkSchedule(t0_us=10**15, count=3000, partitions=2, topic_prefix="x", config=cfg.to_dict(),
                        base={"x.person": [5, 7], "x.auction": [0, 3], "x.bid": [100, 0]})
    clock = OffsetClock(s)
    seen = dict.fromkeys(("person", "auction", "bid"), 0)
    names = topics("x")
    for d in deliveries(cfg, 3000):
        kind = kind_of(d.event)
        k = seen[kind]
        seen[kind] += 1
        off = s.base[names[kind]][k % 2] + k // 2
        t = clock.times_s(names[kind], k % 2, off, off + 1)
        assert t.size == 1 and t[0] == pytest.approx(s.sched_us(d.position) / 1e6, abs=1e-6), (d.position, t)
    # a range: offsets below the base and beyond what was planned are left out
    assert clock.times_s("x.bid", 0, 0, 10**6).size == math.ceil(seen["bid"] / 2)
    assert clock.times_s("x.other", 0, 0, 10).size == 0


def test_a_backlog_sent_faster_than_its_event_time_is_timed_by_its_sends() -> None:
    cfg = NexmarkConfig(rate=1000.0, seed=1)
    s = NexmarkSchedule(t0_us=10**15, count=500, partitions=1, topic_prefix="x", config=cfg.to_dict(),
                        base={"x.person": [0], "x.auction": [0], "x.bid": [0]}, send_delay_us=100)
    assert s.sched_us(10) == 10**15 + 1000 and s.delay_us == 100
    t = OffsetClock(s).times_s("x.person", 0, 0, 2)  # events 0 and 50: 50 sends apart
    assert t[1] - t[0] == pytest.approx(50 * 100 / 1e6)
