"""spark_jobs.cache: a worker's local cache serves only its own (job, store, worker), keeps per-bin
epochs, counters and totals that agree with its data, renumbers its bins when a split raises k,
grows its map on demand, and turns an unusable place into a CacheError saying what to do."""

from __future__ import annotations

import random
import struct
from typing import Any

import lmdb
import pytest

import spark_jobs.cache as C
from spark_jobs import bins as B
from spark_jobs.cache import CacheError, CacheOwnerError, WorkerCache, cache_path

pytestmark = pytest.mark.dataplane
K = 3  # 8 bins


def _sk(b: int, i: int, k: int = K) -> bytes:
    """Store key number i of bin b at k (its hash's top k bits are b)."""
    return B.store_key((b << (64 - k)) | (i + 1), b"k%d" % i)


def _data_counts(c: WorkerCache, txn: Any, k: int = K) -> dict[int, tuple[int, int]]:
    """(keys, bytes) per bin, counted from the cached data itself."""
    out: dict[int, tuple[int, int]] = {}
    for sk, v in txn.cursor(db=c.data):
        n, nbytes = out.get(B.bin_of_store_key(sk, k), (0, 0))
        out[B.bin_of_store_key(sk, k)] = (n + 1, nbytes + len(sk) + len(v))
    return out


def _counters(c: WorkerCache, txn: Any, bins: int) -> dict[int, tuple[int, int]]:
    return {b: kv for b in range(bins) if (kv := c.bin_counter(txn, b)) != (0, 0)}


def test_export_bins_reads_every_entry_of_the_bins_asked(tmp_path):
    c = WorkerCache(tmp_path, "s", "j", 0)
    rng = random.Random(3)
    entries = {B.store_key(rng.getrandbits(64) - (1 << 63), b"k%d" % i): b"v%d" % i for i in range(500)}
    bins = {0, 1, 2, 5, 7}  # two runs of consecutive bins, and the last bin (no upper bound)
    with c.env.begin(write=True) as txn:
        for sk, v in entries.items():
            txn.put(sk, v, db=c.data)
        of, keys, vals = c.export_bins(txn, bins, K)
    c.close()
    expect = sorted((sk, v) for sk, v in entries.items() if B.bin_of_store_key(sk, K) in bins)
    assert list(zip(keys, vals)) == expect
    assert of == [B.bin_of_store_key(sk, K) for sk in keys]


def test_cache_grows_its_map_instead_of_sticking(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "INITIAL_MAP", 1 << 20)  # 1 MiB
    c = WorkerCache(tmp_path, "s", "j", 0)
    try:
        c.write(lambda txn: [txn.put(struct.pack(">Q", i) + b"\x00", b"x" * 1000, db=c.data) for i in range(5000)])
        assert c.env.info()["map_size"] > 1 << 20
    finally:
        c.close()


def test_a_cache_refuses_to_serve_another_workers_place(tmp_path):
    WorkerCache(tmp_path / "c", "store1", "j", 0).close()
    (tmp_path / "c" / "store-store1" / "worker-0000").rename(tmp_path / "c" / "store-store1" / "worker-0001")
    with pytest.raises(CacheError, match="belongs to"):
        WorkerCache(tmp_path / "c", "store1", "j", 1)


def test_the_place_names_the_store_and_the_worker_and_remembers_it_was_new(tmp_path):
    assert cache_path(tmp_path, "abc", 7) == tmp_path / "store-abc" / "worker-0007"
    with WorkerCache(tmp_path, "abc", "j", 7) as c:
        assert c.created and c.path == cache_path(tmp_path, "abc", 7)
    with WorkerCache(tmp_path, "abc", "j", 7) as c:
        assert not c.created, "reopened: its bins may be current"
    with pytest.raises(CacheOwnerError, match="delete it"):
        WorkerCache(tmp_path, "abc", "other-job", 7)  # another job's cache in this place
    (tmp_path / "store-xyz").mkdir()
    cache_path(tmp_path, "abc", 7).rename(cache_path(tmp_path, "xyz", 7))
    with pytest.raises(CacheOwnerError, match="'store_id': 'abc'"):
        WorkerCache(tmp_path, "xyz", "j", 7)  # another store's
    assert (cache_path(tmp_path, "xyz", 7) / "data.mdb").exists(), "another's cache is never deleted"


def test_an_unreadable_owner_record_is_a_cache_error(tmp_path):
    WorkerCache(tmp_path, "s", "j", 0).close()
    env = lmdb.open(str(cache_path(tmp_path, "s", 0)), max_dbs=4)
    with env.begin(write=True, db=env.open_db(b"meta")) as txn:
        txn.put(C.K_OWNER, b"{not json")
    env.close()
    with pytest.raises(CacheError, match="is unreadable"):
        WorkerCache(tmp_path, "s", "j", 0)


def test_a_new_cache_on_a_full_disk_is_refused_before_lmdb_maps_it(tmp_path, monkeypatch):
    WorkerCache(tmp_path, "s", "j", 0).close()
    monkeypatch.setattr(C, "MIN_FREE_BYTES", 1 << 62)
    with WorkerCache(tmp_path, "s", "j", 0):  # its files exist: nothing new to map
        pass
    with pytest.raises(CacheError, match=r"cannot open the local state cache .*--cache-dir.*state is untouched"):
        WorkerCache(tmp_path, "s", "j", 1)


def test_a_map_that_would_pass_the_maximum_is_a_cache_error(tmp_path, monkeypatch):
    monkeypatch.setattr(C, "INITIAL_MAP", 1 << 20)
    monkeypatch.setattr(C, "MAX_MAP", 1 << 21)
    with WorkerCache(tmp_path, "s", "j", 0) as c:
        with pytest.raises(CacheError, match="reached BALLAST_CACHE_MAX_MAP_BYTES"):
            c.write(lambda txn: [txn.put(struct.pack(">Q", i) + b"\x00", b"x" * 1000, db=c.data) for i in range(5000)])
        assert c.write(lambda txn: sum(1 for _ in txn.cursor(db=c.data))) == 0, "nothing committed"


def test_an_epochs_commit_records_owned_and_warm_bins(tmp_path):
    with WorkerCache(tmp_path, "s", "j", 0) as c:
        assert c.write(lambda txn: (c.last_applied(txn), c.owned(txn), c.cached_bins(txn))) == (-1, set(), {})
        owned = {0, 3, 8, 4095}  # the bitmap holds any bin number
        c.write(lambda txn: c.set_owned(txn, 5, owned, {7, 9}, 4))
        assert c.write(lambda txn: (c.last_applied(txn), c.owned(txn))) == (5, owned)
        assert c.write(c.cached_bins) == {0: 5, 3: 5, 8: 5, 4095: 5, 7: 4, 9: 4}
        c.write(lambda txn: c.set_owned(txn, 6, {0, 7}, set(), 5))  # warm bin 7 cut over, the rest dropped
        assert c.write(c.cached_bins) == {0: 6, 7: 6, 9: 4}
        c.write(lambda txn: c.set_owned(txn, 7, set(), set(), 6))
        assert c.write(lambda txn: (c.owned(txn), c.cached_bins(txn))) == (set(), {9: 4})


def test_changes_keep_every_counter_and_total_equal_to_the_data(tmp_path):
    rng = random.Random(4)
    with WorkerCache(tmp_path, "s", "j", 0) as c:
        for _ in range(20):
            b = rng.randrange(1 << K)
            keys = [_sk(b, rng.randrange(30)) for _ in range(rng.randrange(1, 12))]
            values = [None if rng.random() < 0.3 else b"v" * rng.randrange(1, 50) for _ in keys]
            last = dict(zip(keys, values))  # a batch carries one change per key (the durable changes' form)
            puts, nbytes = c.write(lambda txn: c.apply_changes(txn, b, list(last), list(last.values())))
            assert puts == len(last) and nbytes == sum(len(k) + len(v) for k, v in last.items() if v is not None)

            def check(txn: Any) -> None:
                data = _data_counts(c, txn)
                assert _counters(c, txn, 1 << K) == data
                assert c.totals(txn) == (sum(n for n, _ in data.values()), sum(s for _, s in data.values()))
                assert c.bin_counters(txn, list(range(1 << K))) == [data.get(x, (0, 0)) for x in range(1 << K)]
            c.write(check)


def test_many_bins_deltas_at_once_equal_one_at_a_time(tmp_path):
    deltas = {0: (3, 30), 2: (1, 7), 5: (-1, -4), 6: (0, 0)}
    with WorkerCache(tmp_path / "a", "s", "j", 0) as one, WorkerCache(tmp_path / "b", "s", "j", 0) as many:
        one.write(lambda txn: one.add_bin_counter(txn, 5, 2, 10))
        many.write(lambda txn: many.add_bin_counter(txn, 5, 2, 10))
        for b, (dk, db) in deltas.items():
            one.write(lambda txn: one.add_bin_counter(txn, b, dk, db))
        got = many.write(lambda txn: many.add_bin_counters(txn, deltas))
        assert got == {0: (3, 30), 2: (1, 7), 5: (1, 6), 6: (0, 0)}
        for c in (one, many):
            assert c.write(lambda txn: (_counters(c, txn, 8), c.totals(txn))) == (
                {0: (3, 30), 2: (1, 7), 5: (1, 6)}, (5, 43))
        many.write(lambda txn: many.add_bin_counters(txn, {0: (-3, -30)}))
        assert many.write(lambda txn: many.bin_counter(txn, 0)) == (0, 0)  # back to zero: the entry goes


@pytest.mark.parametrize("b", [0, 4, 7])  # the last bin's range has no upper bound
def test_drop_bin_forgets_that_bin_only(tmp_path, b):
    with WorkerCache(tmp_path, "s", "j", 0) as c:
        for x in range(1 << K):
            c.write(lambda txn: c.apply_changes(txn, x, [_sk(x, i) for i in range(5)], [b"v"] * 5))
            c.write(lambda txn: c.set_bin_at(txn, x, 3))
        c.write(lambda txn: c.drop_bin(txn, b, K))

        def check(txn: Any) -> None:
            data = _data_counts(c, txn)
            assert sorted(data) == [x for x in range(1 << K) if x != b]
            assert _counters(c, txn, 1 << K) == data and c.totals(txn) == (5 * 7, sum(s for _, s in data.values()))
            assert b not in c.cached_bins(txn) and len(c.cached_bins(txn)) == 7
        c.write(check)


def test_raising_k_renumbers_bins_epochs_and_counters_without_rewriting_a_key(tmp_path):
    with WorkerCache(tmp_path, "s", "j", 0) as c:
        for b in range(1 << K):
            c.write(lambda txn: c.apply_changes(txn, b, [_sk(b, i) for i in range(40)], [b"v%d" % b] * 40))
        c.write(lambda txn: c.set_owned(txn, 9, {1, 2}, {5}, 8))
        before = c.write(lambda txn: list(txn.cursor(db=c.data)))
        c.write(lambda txn: c.ensure_bits(txn, K, K))  # same k: nothing to do
        c.write(lambda txn: c.ensure_bits(txn, K + 2, K))
        assert c.write(lambda txn: list(txn.cursor(db=c.data))) == before
        assert c.write(lambda txn: c.bits(txn, K)) == K + 2
        assert c.write(c.owned) == set(range(4, 12)), "bins 1 and 2 are bins 4..11 at k + 2"
        assert c.write(c.cached_bins) == {**{p: 9 for p in range(4, 12)}, **{p: 8 for p in range(20, 24)}}
        assert c.write(lambda txn: _counters(c, txn, 1 << (K + 2)) == _data_counts(c, txn, K + 2))
        assert c.write(lambda txn: c.totals(txn)) == c.write(lambda txn: (len(before), sum(
            len(k) + len(v) for k, v in before)))


def test_lowering_k_merges_parts_it_holds_whole_and_drops_parts_it_does_not(tmp_path):
    """A merge to k - 1: bins 2p and 2p+1 become bin p. Both parts owned: p is owned; both held at
    different epochs: p is held at the older (a catch-up replays values, so re-putting a newer part's
    change is harmless); one part missing: p is incomplete, the part held is dropped, p is loaded
    whole later. No key is rewritten and the counters are recounted at the new k."""
    with WorkerCache(tmp_path, "s", "j", 0) as c:
        for b in range(1 << K):
            c.write(lambda txn: c.apply_changes(txn, b, [_sk(b, i) for i in range(10)], [b"v%d" % b] * 10))
        # owned at 9: 0, 1 (-> 0), 4 (-> 2, whose part 5 is not held); warm: 2 at 7 and 3 at 8 (-> 1),
        # 6 at 9 beside owned 7 (-> 3)
        c.write(lambda txn: c.set_owned(txn, 9, {0, 1, 4, 7}, set(), 9))
        c.write(lambda txn: [c.set_bin_at(txn, b, e) for b, e in ((2, 7), (3, 8), (6, 9))])
        c.write(lambda txn: c.drop_bin(txn, 5, K))
        before = c.write(lambda txn: list(txn.cursor(db=c.data)))
        c.write(lambda txn: c.ensure_bits(txn, K - 1, K))
        assert c.write(lambda txn: c.bits(txn, K)) == K - 1
        assert c.write(c.owned) == {0}
        assert c.write(c.cached_bins) == {0: 9, 1: 7, 3: 9}
        after = c.write(lambda txn: list(txn.cursor(db=c.data)))
        part4 = {_sk(4, i) for i in range(10)}
        assert after == [kv for kv in before if kv[0] not in part4], "part 4 dropped, no other key touched"
        assert c.write(lambda txn: _counters(c, txn, 1 << (K - 1)) == _data_counts(c, txn, K - 1))
        assert c.write(lambda txn: c.totals(txn)) == (len(after), sum(len(k) + len(v) for k, v in after))
        c.write(lambda txn: c.ensure_bits(txn, K, K - 1))  # and split again: the parts at the merged epochs
        assert c.write(c.cached_bins) == {0: 9, 1: 9, 2: 7, 3: 7, 6: 9, 7: 9}
