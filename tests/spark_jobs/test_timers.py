"""spark_jobs.timers: a timer's index entry sorts inside its key's bin, in expiry order, and a split
re-files it under its own part; an epoch's clock is fixed once and reused on replay; the schedule
says when an epoch without input must still run tasks, or the job tick itself."""

from __future__ import annotations

import struct

import pytest

from spark_jobs import timers
from spark_jobs.bins import bin_of_hash, bin_of_store_key, bin_range, store_key
from spark_jobs.cache import WorkerCache
from spark_jobs.storage import Location

pytestmark = pytest.mark.dataplane
K = 4  # 16 bins


def test_timer_index_sorts_inside_the_bin_in_expiry_order(tmp_path):
    keys = [b"k%d" % i for i in range(200)]
    hs = [(hash(k) * 2654435761) & ((1 << 64) - 1) for k in keys]
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        def fill(txn):
            for i, (key, h) in enumerate(zip(keys, hs)):
                sk = store_key(h, key)
                txn.put(timers.index_key(sk, K, timers.USER, 1000 - i), key, db=cache.data)
                txn.put(timers.index_key(sk, K, timers.TTL, -5), key, db=cache.data)
                lo, hi = bin_range(bin_of_hash(h, K), K)
                ik = timers.index_key(sk, K, timers.USER, 1000 - i)
                assert lo <= ik and (hi is None or ik < hi), "an index entry outside its key's bin"
                assert timers.parse_index_key(ik) == (timers.USER, 1000 - i, sk)
        cache.write(fill)

        def check(txn):
            for b in range(1 << K):
                mine = sorted(1000 - i for i, h in enumerate(hs) if bin_of_hash(h, K) == b)
                got = [ts for ts, _, _ in timers.scan(txn, cache.data, b, K, timers.USER, None)]
                assert got == mine
                assert [ts for ts, _, _ in timers.scan(txn, cache.data, b, K, timers.USER, 900)] == \
                    [t for t in mine if t <= 900]
                assert all(ts == -5 for ts, _, _ in timers.scan(txn, cache.data, b, K, timers.TTL, 0))
            assert timers.first_due(txn, cache.data, range(1 << K), K, timers.USER) == 1000 - 199
        cache.write(check)


def test_clock_is_logged_once_and_reused_on_replay(tmp_path):
    log = timers.ClockLog(Location.of(str(tmp_path)))
    c1 = log.for_epoch(7, 60_000, 5_000)
    assert c1.watermark_ms == 55_000 and c1.due("EventTime") == 55_000 and c1.due("None") is None
    assert log.for_epoch(7, 99_999_999, 0) == c1, "a replay reuses the logged clock"
    assert log.for_epoch(8, None, 5_000).watermark_ms == 0
    log.gc(8)
    assert log.for_epoch(7, 70_000, 0).watermark_ms == 70_000  # gone, so decided anew


def test_schedule_decides_when_quiet_epochs_need_tasks():
    s = timers.TimerSchedule("EventTime", 1000)
    clock = timers.EpochClock(3, processing_ms=10_000, watermark_ms=5_000)
    assert s.epoch_needs_tasks(clock), "unknown after a start: run once"
    s.update([{"next_timer_ms": 6000, "next_expiry_ms": None}, {"next_timer_ms": None}])
    assert not s.epoch_needs_tasks(clock) and not s.tick_due(10_000, 6_500)
    assert s.tick_due(10_000, 7_000) and s.epoch_needs_tasks(timers.EpochClock(4, 10_000, 6_000))
    s.update([{"next_expiry_ms": 9_000}])
    assert s.epoch_needs_tasks(clock), "a TTL expiry due at processing time"




def test_rehome_moves_only_stray_entries_and_records_them(tmp_path):
    hs = [((i * 0x9E3779B97F4A7C15) & ((1 << 64) - 1)) - (1 << 63) for i in range(1, 200)]
    sks = [store_key(h, b"k%d" % i) for i, h in enumerate(hs)]
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        cache.write(lambda txn: [txn.put(timers.index_key(sk, K, timers.USER, 7), b"v", db=cache.data) for sk in sks])
        log: list = []
        moved = cache.write(lambda txn: timers.rehome(txn, cache.data, set(range(1 << (K + 2))), K + 2,
                                                      lambda b, ik, v: log.append((b, ik, v))))
        strays = [sk for sk in sks if bin_of_store_key(sk, K + 2) % 4 != 0]  # not in their bin's first part
        assert moved == len(strays) > 0 and len(log) == 2 * moved
        for b, ik, v in log:
            lo, hi = bin_range(b, K + 2)
            assert (v is None) or (lo <= ik and (hi is None or ik < hi)), "a put lands inside its part"
        with pytest.raises(RuntimeError, match="without moves"):
            cache.write(lambda txn: timers.rehome(txn, cache.data, {0, 4, 8}, K + 2, lambda *a: None))




def test_index_keys_sort_by_kind_then_expiry_negative_times_included():
    sk = store_key(-(1 << 62), b"user")
    stamps = [-(1 << 62), -5, -1, 0, 1, 5, 1 << 62]
    user = [timers.index_key(sk, K, timers.USER, ts) for ts in stamps]
    assert sorted(user) == user, "offset binary: byte order is time order"
    ttl = timers.index_key(sk, K, timers.TTL, -(1 << 62))
    assert max(user) < ttl, "every user timer of a bin sorts before its TTL expiries"
    for ts, ik in zip(stamps, user):
        assert timers.parse_index_key(ik) == (timers.USER, ts, sk)
        assert timers.is_index_key(ik) and not timers.is_index_key(sk)
        assert ik[:8] == timers.bin_prefix(sk, K) and bin_of_store_key(ik, K) == bin_of_store_key(sk, K)
    assert timers.bin_prefix(sk, 0) == bytes(8)


def test_scan_stops_at_the_bins_end_and_first_due_finds_none_without_timers(tmp_path):
    h0, h1 = 0, 1 << 60  # bins 0 and 1 at K = 4
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        assert cache.write(lambda txn: timers.first_due(txn, cache.data, range(1 << K), K, timers.USER)) is None
        cache.write(lambda txn: [txn.put(timers.index_key(store_key(h, b"k"), K, timers.USER, ts), b"k", db=cache.data)
                                 for h, ts in ((h0, 30), (h1, 10), (h1, 20))])
        got = cache.write(lambda txn: [list(timers.scan(txn, cache.data, b, K, timers.USER, None)) for b in (0, 1, 2)])
        assert [[ts for ts, _, _ in g] for g in got] == [[30], [10, 20], []]
        assert got[1][0][1:] == (store_key(h1, b"k"), b"k")  # (expiry, the key's store key, the key)
        assert cache.write(lambda txn: list(timers.scan(txn, cache.data, 0, K, timers.TTL, None))) == []
        assert cache.write(lambda txn: timers.first_due(txn, cache.data, [0, 1], K, timers.USER)) == 10
        assert cache.write(lambda txn: timers.first_due(txn, cache.data, [0], K, timers.USER)) == 30


@pytest.mark.parametrize("mode, due", [("EventTime", 5_000), ("ProcessingTime", 10_000), ("None", None)])
def test_an_epochs_timers_fire_up_to_the_time_of_the_query_mode(mode, due):
    assert timers.EpochClock(3, processing_ms=10_000, watermark_ms=5_000).due(mode) == due


def test_the_watermark_never_goes_below_zero_and_gc_keeps_later_clocks(tmp_path):
    log = timers.ClockLog(Location.of(str(tmp_path)))
    assert log.for_epoch(0, 1_000, 5_000).watermark_ms == 0
    for e in (1, 2, 3):
        log.for_epoch(e, 10_000 * e, 0)
    (log.dir / "README").write_bytes(b"")
    log.gc(2)
    assert sorted(log.dir.list()) == ["000000000002.json", "000000000003.json", "README"]
    assert log.for_epoch(2, None, 0).watermark_ms == 20_000


def test_a_processing_time_schedule_ticks_on_the_wall_clock():
    s = timers.TimerSchedule("ProcessingTime", 0)
    s.update([{"next_timer_ms": 6_000}])
    assert not s.tick_due(5_999, None) and s.tick_due(6_000, None)
    assert not s.epoch_needs_tasks(timers.EpochClock(1, 5_000, 99_999)), "the watermark does not fire it"


def test_without_a_time_mode_only_ttl_expiries_are_due():
    s = timers.TimerSchedule("None", 0)
    s.update([{"next_timer_ms": 1, "next_expiry_ms": None}])
    assert not s.tick_due(10**12, 10**12) and not s.epoch_needs_tasks(timers.EpochClock(1, 10**12, 10**12))
    s.update([{"next_expiry_ms": 500}, {"next_expiry_ms": 400}])
    assert s.next_expiry == 400 and s.tick_due(400, None) and not s.tick_due(399, None)


def test_rehome_refuses_a_timer_whose_part_moved_away(tmp_path):
    sk = store_key(struct.unpack(">q", b"\x04" + bytes(7))[0], b"k")  # bin 0 at K; part 1 of it at K + 2
    assert bin_of_store_key(sk, K) == 0 and bin_of_store_key(sk, K + 2) == 1
    with WorkerCache(tmp_path, "s", "job", 0) as cache:
        cache.write(lambda txn: txn.put(timers.index_key(sk, K, timers.TTL, 9), b"k", db=cache.data))
        with pytest.raises(RuntimeError, match="timer of bin 1 found under bin 0"):
            cache.write(lambda txn: timers.rehome(txn, cache.data, {0}, K + 2, lambda *a: None))
        log: list = []
        assert cache.write(lambda txn: timers.rehome(txn, cache.data, {0, 1}, K + 2,
                                                     lambda *a: log.append(a))) == 1
        assert log == [(0, timers.index_key(sk, K, timers.TTL, 9), None),
                       (1, timers.index_key(sk, K + 2, timers.TTL, 9), b"k")]
