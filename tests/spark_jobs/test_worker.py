"""spark_jobs.worker: one worker's epoch, driven directly with Arrow tables the way `mapInArrow`
would (tests/helpers/worker_epochs.py). A move is a change of owner, a new executor rebuilds from
the durable state, two attempts of an epoch write identical objects, pre-copied bins replay only
the changes since, any key works, and a fold that raises sends its record to the dead letters."""

from __future__ import annotations

import time

import pytest

from spark_jobs import bins as B
from spark_jobs.cache import WorkerCache
from spark_jobs.durable import find_object
from spark_jobs.objects import DEAD_LETTER, OUTPUT, ObjectReader, ObjectWriter
from spark_jobs.operators import OPERATORS, KeyCount, decode_count
from spark_jobs.storage import Location
from spark_jobs.worker import BinRecords, _done_outputs, fold_rows
from tests.helpers.worker_epochs import Harness, K, keys_of

pytestmark = pytest.mark.dataplane


def test_state_survives_moves_new_executors_and_snapshots(tmp_path):
    hz = Harness(tmp_path, workers=2, snapshot_every=3)
    for e in range(4):
        hz.run_epoch(keys_of(300, e))
    # move bins 0 and 5 across; worker 1 then lands on a fresh executor (empty cache)
    outs, docs = hz.run_epoch(keys_of(300, 10), moves=[(0, 0, 1), (5, 1, 0)])
    moved = {b: info for d in docs for b, info in d["moved_in"].items()}
    assert set(moved) == {"0", "5"} and all(i["mode"] == "load" for i in moved.values())
    assert sum(i["keys"] for i in moved.values()) > 0
    hz.executor_of[1] = "exec-b"
    for e in range(11, 20):
        outs, docs = hz.run_epoch(keys_of(300, e))
    assert hz.durable_counts() == dict(hz.ref)
    for w, ex in ((0, "exec-a"), (1, "exec-b")):  # the caches' counters agree with their data
        c = WorkerCache(tmp_path / ex, hz.ds.store_id, "j", w)
        with c.env.begin() as txn:
            per_bin = {b: c.bin_counter(txn, b) for b in range(8)}
            data = list(txn.cursor(db=c.data))
            assert c.totals(txn) == (len(data), sum(len(k) + len(v) for k, v in data))
            assert sum(k for k, _ in per_bin.values()) == len(data)
            assert {b for b, (k, _) in per_bin.items() if k} == {B.bin_of_store_key(sk, K) for sk, _ in data}
        c.close()
    # the outputs of the last epoch are the reference counts of its keys
    last = {k: int(v) for kind, k, v, _ in outs if kind == OUTPUT}
    assert last == {k: hz.ref[k] for k in set(keys_of(300, 19))}
    # retention kept two snapshots and dropped what came before the older one
    snaps = [e.epoch for e in hz.ds.entries if e.snapshot]
    assert len(snaps) == 2 and hz.ds.entries[0].epoch == snaps[0]
    assert not (Location.of(hz.uri) / "changelog" / "000000000000").exists()


def test_two_attempts_write_identical_objects_and_a_late_attempt_changes_nothing(tmp_path):
    hz = Harness(tmp_path, workers=2)
    for e in range(3):
        hz.run_epoch(keys_of(200, e))
    cfg = hz.cfg()
    keys = keys_of(200, 3)
    first = hz.task(cfg, 0, keys, "exec-a")
    second = hz.task(cfg, 0, keys, "exec-z")  # a retry on an executor that never saw worker 0
    assert first == second
    objs = [n for n in (Location.of(hz.uri) / "changelog" / "000000000003").list() if n.startswith("w0000")]
    assert len(objs) == 2
    metas = [ObjectReader(Location.of(hz.uri) / "changelog" / "000000000003" / n) for n in objs]
    first, second = metas
    assert [first.bin_changes(b) for b in range(8)] == [second.bin_changes(b) for b in range(8)]
    hz.task(cfg, 1, keys, "exec-a")
    hz.ds.commit_epoch(3, hz.version, 2, False)
    hz.epoch = 4
    for k in keys:
        hz.ref[k] += 1
    hz.run_epoch(keys_of(200, 4))
    # a zombie attempt of epoch 3 arrives late: the object exists, so the task only re-emits
    assert find_object(hz.uri, "changelog", 3, 0) is not None
    assert hz.durable_counts() == dict(hz.ref)


def _check_counters(hz: Harness, worker: int, executor: str) -> None:
    """The cache's per-bin counters (at the job's current k) and totals agree with its data."""
    c = WorkerCache(hz.root / executor, hz.ds.store_id, "j", worker)
    try:
        with c.env.begin() as txn:
            data = list(txn.cursor(db=c.data))
            want: dict[int, list[int]] = {}
            for sk, v in data:
                w = want.setdefault(B.bin_of_store_key(sk, hz.k), [0, 0])
                w[0] += 1
                w[1] += len(sk) + len(v)
            got = {b: list(c.bin_counter(txn, b)) for b in range(1 << hz.k) if c.bin_counter(txn, b) != (0, 0)}
            assert got == want
            assert c.totals(txn) == (len(data), sum(len(k) + len(v) for k, v in data))
            assert c.bits(txn, K) == hz.k
    finally:
        c.close()


def test_a_split_moves_no_key_and_then_a_half_bin_moves_alone(tmp_path):
    hz = Harness(tmp_path, workers=2, snapshot_every=3)
    for e in range(5):  # a snapshot (epoch 3) and changelogs at 8 bins
        hz.run_epoch(keys_of(300, e))
    hz.split(K + 2)  # 8 -> 32 bins: bin b is now bins 4b..4b+3, on b's worker
    outs, docs = hz.run_epoch(keys_of(300, 5))
    assert all(not d["moved_in"] for d in docs), "a split moves nothing"
    assert {int(b) for d in docs for b in d["bins"]} <= set(range(32))
    assert hz.durable_counts() == dict(hz.ref)
    for w in range(2):
        _check_counters(hz, w, "exec-a")
    # one quarter of old bin 0 moves to worker 1 alone: its new owner reads it out of objects
    # written at 8 bins (snapshot and changelogs before the split) and at 32 (since)
    _, docs = hz.run_epoch(keys_of(300, 6), moves=[(1, 0, 1)])
    assert list(docs[1]["moved_in"]) == ["1"] and docs[1]["moved_in"]["1"]["mode"] == "load"
    quarter = {k for k in hz.ref if B.bin_of_hash(hz.h(k), hz.k) == 1}
    assert 0 < len(quarter) < len({k for k in hz.ref if B.bin_of_hash(hz.h(k), K) == 0})
    c = WorkerCache(tmp_path / "exec-a", hz.ds.store_id, "j", 1)
    with c.env.begin() as txn:
        lo, hi = B.bin_range(1, hz.k)
        held = {B.decode_entry(sk, v)[0]: decode_count(B.decode_entry(sk, v)[1]) for sk, v in txn.cursor(db=c.data)
                if lo <= sk < hi}
    c.close()
    assert held == {k: hz.ref[k] for k in quarter}, "the quarter's keys, exactly, at their counts"
    # and a fresh executor for worker 1 rebuilds all of its bins across the split
    hz.executor_of[1] = "exec-b"
    for e in range(7, 12):
        hz.run_epoch(keys_of(300, e))
    assert hz.durable_counts() == dict(hz.ref)
    _check_counters(hz, 0, "exec-a")
    _check_counters(hz, 1, "exec-b")


def test_a_merge_moves_no_key_and_a_fresh_executor_rebuilds_across_splits_moves_and_merges(tmp_path):
    """8 bins, split to 16, a part moved away and back so that the parts of bin 0 lived on two workers,
    then merged to 8 and to 4: every epoch's counts stay exact, the merge's epoch loads nothing, and a
    fresh executor rebuilds each merged bin from objects written at 8 and 16 bins by both workers."""
    hz = Harness(tmp_path, workers=2, snapshot_every=3)
    for e in range(4):
        hz.run_epoch(keys_of(300, e))
    hz.split(K + 1)
    hz.run_epoch(keys_of(300, 4))
    hz.run_epoch(keys_of(300, 5), moves=[(1, 0, 1)])  # bin 0's halves now on workers 0 and 1
    for e in range(6, 9):
        hz.run_epoch(keys_of(300, e))
    _, docs = hz.run_epoch(keys_of(300, 9), moves=[(0, 0, 1)])  # both halves on worker 1
    assert list(docs[1]["moved_in"]) == ["0"]
    hz.merge(K)
    _, docs = hz.run_epoch(keys_of(300, 10))
    assert all(not d["moved_in"] for d in docs), "a merge moves nothing: the parts shared a worker"
    assert {int(b) for d in docs for b in d["bins"]} <= set(range(8))
    assert hz.durable_counts() == dict(hz.ref)
    for w in range(2):
        _check_counters(hz, w, "exec-a")
    hz.run_epoch(keys_of(300, 11), moves=[(1, 0, 1)])  # map [1, 0, 0, 0, 1, 1, 1, 1]: bring bin 1 to bin 0
    hz.merge(K - 1)  # 8 -> 4 bins: [1, 0, 1, 1]
    assert hz.assignment == [1, 0, 1, 1]
    hz.run_epoch(keys_of(300, 12))
    hz.executor_of = {0: "exec-b", 1: "exec-c"}  # both workers on fresh executors
    for e in range(13, 17):
        hz.run_epoch(keys_of(300, e))
    assert hz.durable_counts() == dict(hz.ref)
    _check_counters(hz, 0, "exec-b")
    _check_counters(hz, 1, "exec-c")


def test_precopy_warms_then_cuts_over_with_a_small_delta(tmp_path):
    hz = Harness(tmp_path, workers=2, snapshot_every=100)
    for e in range(3):
        hz.run_epoch(keys_of(400, e))
    # warm bin 1 (owned by worker 0) on worker 1 for two epochs, then cut over
    _, docs = hz.run_epoch(keys_of(400, 3), warm={1: (1,)})
    warmed = docs[1]["warmed"]
    assert warmed["1"]["mode"] == "load" and warmed["1"]["keys"] > 0
    _, docs = hz.run_epoch(keys_of(400, 4), warm={1: (1,)})
    assert docs[1]["warmed"]["1"]["mode"] == "catchup"
    _, docs = hz.run_epoch(keys_of(400, 5), moves=[(1, 0, 1)])
    cut = docs[1]["moved_in"]["1"]
    assert cut["mode"] == "catchup"
    loaded = warmed["1"]["keys"]
    assert cut["keys"] < loaded  # only one epoch's changes of the bin, not the whole bin
    hz.run_epoch(keys_of(400, 6))
    assert hz.durable_counts() == dict(hz.ref)


def test_precopy_to_a_worker_that_does_not_exist_yet(tmp_path):
    hz = Harness(tmp_path, workers=2)
    hz.run_epoch(keys_of(300, 0))
    _, docs = hz.run_epoch(keys_of(300, 1), warm={2: (0, 7)})
    assert len(docs) == 3 and set(docs[2]["warmed"]) == {"0", "7"}
    hz.workers = 3
    _, docs = hz.run_epoch(keys_of(300, 2), moves=[(0, 0, 2), (7, 1, 2)])
    assert {i["mode"] for i in docs[2]["moved_in"].values()} <= {"catchup", "warm"}
    assert hz.durable_counts() == dict(hz.ref)


def test_keys_of_any_length_and_content(tmp_path):
    hz = Harness(tmp_path, workers=2)
    keys = [b"", b"\x00", b"a" * 400, b"a" * 401, b"b" * 100_000, bytes(range(256)) * 4, "ключ".encode()]
    for _ in range(3):
        outs, _ = hz.run_epoch(keys + keys[:2])
    assert hz.durable_counts() == dict(hz.ref)
    got = {k: int(v) for kind, k, v, _ in outs if kind == OUTPUT}
    assert got[b"b" * 100_000] == 3 and got[b""] == 6
    long_sk = B.store_key(hz.h(b"b" * 100_000), b"b" * 100_000)
    assert len(long_sk) < 511 and B.is_long_key(long_sk)


class PoisonCount(KeyCount):
    name = "poisoncount"

    def fold(self, key, state, values):
        if b"poison" in values:
            raise ValueError("cannot count poison")
        return super().fold(key, state, values)


def test_a_fold_that_raises_sends_its_record_to_the_dead_letters(tmp_path, monkeypatch):
    monkeypatch.setitem(OPERATORS, "poisoncount", PoisonCount)
    hz = Harness(tmp_path, workers=1, operator="poisoncount")
    keys = [b"a", b"a", b"b", b"a"]
    outs, docs = hz.run_epoch(keys, values=[b"1", b"poison", b"1", b"1"])
    dead = [(k, v, note) for kind, k, v, note in outs if kind == DEAD_LETTER]
    assert len(dead) == 1 and dead[0][:2] == (b"a", b"poison") and "cannot count poison" in dead[0][2]
    assert '"offset": 1' in dead[0][2] and '"topic": "in"' in dead[0][2]
    assert docs[0]["dead_letters"] == 1
    hz.ref[b"a"] -= 1  # the poisoned record is not counted
    assert hz.durable_counts() == dict(hz.ref)


class Keeper(KeyCount):
    """Counts, except that a value b"same" leaves the state as it was and b"drop" deletes the key."""

    name = "keeper"

    def fold(self, key, state, values):  # type: ignore[no-untyped-def]
        if values == [b"same"]:
            return state, [(key, b"same")]
        if values == [b"drop"]:
            return None, []
        return super().fold(key, state, values)


def _fold(hz: Harness, keys: list[bytes], values: list[bytes], cache: WorkerCache) -> tuple[ObjectWriter, BinRecords]:
    t = hz.table(keys, 0, values)
    assert t is not None
    writer = ObjectWriter(meta={})
    dead, recs = cache.write(lambda txn: fold_rows(hz.cfg(), cache, txn, t, t.num_rows, writer))
    assert dead == 0
    return writer, recs


def test_a_fold_that_keeps_the_state_writes_no_change_and_a_none_deletes_the_key(tmp_path, monkeypatch):
    monkeypatch.setitem(OPERATORS, "keeper", Keeper)
    hz = Harness(tmp_path, workers=1, operator="keeper")
    with WorkerCache(tmp_path / "exec-a", "s", "j", 0) as cache:
        w, recs = _fold(hz, [b"a", b"b"], [b"1", b"1"], cache)
        assert len(w._index) == len({B.bin_of_hash(hz.h(k), K) for k in (b"a", b"b")})  # both bins changed
        assert cache.write(lambda txn: cache.totals(txn))[0] == 2 and set(recs.counters) == set(recs.bins)
        w, recs = _fold(hz, [b"a"], [b"same"], cache)
        assert w._index == [] and w.outputs == [(OUTPUT, b"a", b"same", None)]
        assert recs.records == [1] and recs.counters == {}, "records counted, counters unchanged"
        w, recs = _fold(hz, [b"a"], [b"drop"], cache)
        assert w._values == [None] and cache.write(lambda txn: cache.totals(txn))[0] == 1
        bin_a = B.bin_of_hash(hz.h(b"a"), K)
        assert recs.counters == {bin_a: cache.write(lambda txn: cache.bin_counter(txn, bin_a))}
        assert recs.counters[bin_a][0] == (B.bin_of_hash(hz.h(b"b"), K) == bin_a), "a's key is gone from its bin"


def test_an_epoch_without_rows_folds_nothing(tmp_path):
    hz = Harness(tmp_path, workers=1)
    with WorkerCache(tmp_path / "c", "s", "j", 0) as cache:
        writer = ObjectWriter(meta={})
        assert cache.write(lambda txn: fold_rows(hz.cfg(), cache, txn, None, 0, writer)) == (0, BinRecords.empty())
        assert writer.outputs == []


def test_bin_metrics_read_the_counters_the_epoch_did_not_change(tmp_path):
    recs = BinRecords.of({5: (2, None, 7), 1: (4, (3, 30), 9), 3: (1, None, 0)})
    assert recs.bins == [1, 3, 5] and recs.records == [4, 1, 2] and recs.counters == {1: (3, 30)}
    with WorkerCache(tmp_path, "s", "j", 0) as cache:
        cache.write(lambda txn: cache.add_bin_counters(txn, {1: (9, 90), 5: (2, 20)}))
        got = cache.write(lambda txn: recs.metrics(cache, txn))
    assert got == {"1": [4, 3, 30, 9], "3": [1, 0, 0, 0], "5": [2, 2, 20, 7]}, "records, keys, bytes, fold µs"


class SlowOnOne(KeyCount):
    """Counts; the key b"slow" takes 20 ms per fold (a key whose records cost more than others')."""

    name = "slowonone"

    def fold(self, key, state, values):  # type: ignore[no-untyped-def]
        if key == b"slow":
            time.sleep(0.02)
        return super().fold(key, state, values)


def test_each_bins_fold_time_is_measured_where_records_would_not_show_it(tmp_path, monkeypatch):
    """One record of a slow key against 50 records of cheap keys: by records its bin is light, by
    the fold time the worker measures it is the heaviest (ballast.policy.critical.bin_weights)."""
    monkeypatch.setitem(OPERATORS, "slowonone", SlowOnOne)
    hz = Harness(tmp_path, workers=1, operator="slowonone")
    slow_bin = B.bin_of_hash(hz.h(b"slow"), K)
    cheap = [k for k in (b"k%d" % i for i in range(200)) if B.bin_of_hash(hz.h(k), K) != slow_bin][:50]
    with WorkerCache(tmp_path / "c", "s", "j", 0) as cache:
        _, recs = _fold(hz, [b"slow", *cheap], [b"1"] * (1 + len(cheap)), cache)
    us = dict(zip(recs.bins, recs.fold_us))
    rec = dict(zip(recs.bins, recs.records))
    assert rec[slow_bin] == 1 and max(rec.values()) > 1
    assert us[slow_bin] >= 20_000 > sum(us.values()) - us[slow_bin], us


def test_a_finished_attempts_outputs_are_found_and_re_emitted(tmp_path):
    hz = Harness(tmp_path, workers=2)
    cfg = hz.cfg()
    assert _done_outputs(cfg, 0) is None
    outs = hz.task(cfg, 0, keys_of(50, 1), "exec-a")
    assert outs and _done_outputs(cfg, 0) == outs and _done_outputs(cfg, 1) is None


def test_an_epochs_config_travels_as_text_and_a_task_without_it_says_why(tmp_path):
    import base64
    import pickle

    from spark_jobs.worker import APPLY_PROPERTY, apply_task, encode_config

    h = Harness(tmp_path, workers=2)
    cfg = h.cfg(moving_in={1: (2,)}, snapshot=True)
    assert pickle.loads(base64.b64decode(encode_config(cfg))) == cfg  # what each task of the epoch decodes
    with pytest.raises(RuntimeError, match=APPLY_PROPERTY):  # no Spark task here, so no local property
        list(apply_task(iter([])))
