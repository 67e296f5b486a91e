"""The durable state, the executor-local caches and a worker's epoch, without Spark (milliseconds).

The worker's epoch function (`spark_jobs.worker._run`) is driven directly with Arrow tables, the
way `mapInArrow` would, so the exactly-once argument of docs/dataplane.md is checked on its own:
a move is a change of owner, a new executor rebuilds from the durable state, two attempts of an
epoch write identical objects, pre-copied bins only replay the changes since, any key works, and
a fold that raises sends its record to the dead letters.
"""

from __future__ import annotations

import random
import struct
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from spark_jobs import bins as B
from spark_jobs.cache import CacheError, WorkerCache
from spark_jobs.durable import DurableState, StateGap, StoreMismatch, find_object, read_state
from spark_jobs.objects import DEAD_LETTER, OUTPUT, ObjectReader, ObjectWriter
from spark_jobs.operators import OPERATORS, KeyCount, decode_count
from spark_jobs.storage import Location
from spark_jobs.worker import ApplyConfig, _run

pytestmark = pytest.mark.dataplane
K = 3  # 8 bins


class Harness:
    """Drives epochs like the runner does: tasks per worker (each on a chosen 'executor' cache
    dir), then the driver's commit; keeps a pure-Python reference of counts and outputs."""

    def __init__(self, root: Path, workers: int = 2, snapshot_every: int = 3, operator: str = "keycount") -> None:
        self.root = root
        self.uri = str(root / "state")
        self.ds = DurableState(self.uri, "j", 1 << K, snapshot_every=snapshot_every)
        self.k = K  # raised by split()
        self.assignment = B.uniform_assignment(1 << K, workers)
        self.workers = workers
        self.version = 0
        self.epoch = 0
        self.operator = operator
        self.ref: Counter[bytes] = Counter()
        self.rng = random.Random(5)
        self.hashes: dict[bytes, int] = {}
        self.executor_of = {w: "exec-a" for w in range(workers)}

    def h(self, key: bytes) -> int:
        if key not in self.hashes:
            self.hashes[key] = self.rng.getrandbits(64) - (1 << 63)
        return self.hashes[key]

    def table(self, keys: list[bytes], worker: int, values: list[bytes] | None = None) -> pa.Table | None:
        rows = [(k, (values[i] if values else b"1"), 0, i) for i, k in enumerate(keys)
                if self.assignment[B.bin_of_hash(self.h(k), self.k)] == worker]
        if not rows:
            return None
        ks, vs, ps, os_ = zip(*rows)
        hs = [self.h(k) for k in ks]
        return pa.table({"key": pa.array(ks, pa.binary()), "value": pa.array(vs, pa.binary()),
                         "partition": pa.array(ps, pa.int32()), "offset": pa.array(os_, pa.int64()),
                         "h": pa.array(hs, pa.int64()),
                         "bin": pa.array([B.bin_of_hash(x, self.k) for x in hs], pa.int32()),
                         "worker": pa.array([worker] * len(ks), pa.int32())})

    def cfg(self, moving_in=None, warm=None, snapshot=False) -> ApplyConfig:
        return ApplyConfig(epoch=self.epoch, job="j", operator=self.operator, bins_bits=self.k, base_bits=K,
                           workers=self.workers,
                           assignment=tuple(self.assignment), state_uri=self.ds.uri, store_id=self.ds.store_id,
                           history=self.ds.history(before=self.epoch), output_topic="j.output", dlq_topic="j.dlq",
                           input_topic="in", snapshot=snapshot, moving_in=moving_in or {}, warm=warm or {})

    def task(self, cfg: ApplyConfig, worker: int, keys: list[bytes], executor: str,
             values: list[bytes] | None = None) -> list:
        t = self.table(keys, worker, values)
        n = t.num_rows if t is not None else 0
        cache = WorkerCache(self.root / executor, cfg.store_id, "j", worker)
        try:
            return cache.write(lambda txn: _run(cfg, cache, txn, worker, t, n, f"att-{executor}", 0.0, 0.0))
        finally:
            cache.close()

    def run_epoch(self, keys: list[bytes], moves=(), warm=None, values=None) -> tuple[list, list[dict]]:
        moving_in: dict[int, tuple[int, ...]] = {}
        if moves:
            for b, src, dst in moves:
                assert self.assignment[b] == src
                self.assignment[b] = dst
                moving_in[dst] = moving_in.get(dst, ()) + (b,)
            self.version += 1
        self.ds.record_map(self.version, self.assignment)
        tasks = max([self.workers] + [w + 1 for w in (warm or {})])
        snapshot = self.ds.snapshot_due(self.epoch)
        cfg = self.cfg(moving_in, warm, snapshot)
        outs = []
        for w in range(tasks):
            outs += self.task(cfg, w, keys, self.executor_of.get(w, "exec-a"), values)
        docs = self.ds.commit_epoch(self.epoch, self.version, tasks, snapshot)
        self.ds.retain()
        for k in keys:
            self.ref[k] += 1
        self.epoch += 1
        return outs, docs

    def split(self, bits: int) -> None:
        """A split step: the map's bin count becomes 2^bits, every bin's halves stay on its worker."""
        from ballast.protocol import split_assignment

        self.assignment = split_assignment(self.assignment, 1 << bits)
        self.k = bits
        self.version += 1

    def durable_counts(self) -> dict[bytes, int]:
        got: dict[bytes, int] = {}
        for b, kv in read_state(self.uri).items():
            for sk, v in kv.items():
                key, st = B.decode_entry(sk, v)
                assert B.bin_of_store_key(sk, self.k) == b
                got[key] = decode_count(st)
        return got


def keys_of(n: int, seed: int) -> list[bytes]:
    r = random.Random(seed)
    return [b"k%d" % r.randrange(200) for _ in range(n)]


def test_object_roundtrip_reads_one_bin_alone(tmp_path):
    w = ObjectWriter(meta={"epoch": 3, "metrics": {"worker": 1}})
    w.add_bin(2, [b"a", b"b"], [b"1", None])
    w.add_bin(5, [b"c"], [b"3"])
    w.add_output(OUTPUT, b"a", b"1")
    w.add_output(DEAD_LETTER, b"x", b"bad", '{"error": "E"}')
    with pytest.raises(ValueError):
        w.add_bin(4, [b"d"], [b"4"])
    loc = Location.of(tmp_path) / "o.arrow"
    loc.write_bytes(w.to_bytes())
    r = ObjectReader(loc)
    assert r.bins == [2, 5] and r.meta["metrics"] == {"worker": 1}
    assert r.bin_changes(5) == ([b"c"], [b"3"]) and r.bin_changes(2) == ([b"a", b"b"], [b"1", None])
    assert r.bin_changes(7) == ([], [])
    assert r.outputs() == [(OUTPUT, b"a", b"1", None), (DEAD_LETTER, b"x", b"bad", '{"error": "E"}')]
    r.close()
    assert [n for n in Location.of(tmp_path).list()] == ["o.arrow"]  # no temporaries left


def test_objects_chunk_many_bins_into_few_batches(tmp_path, monkeypatch):
    import spark_jobs.objects as D

    monkeypatch.setattr(D, "CHUNK_ROWS", 10)
    w = ObjectWriter(meta={})
    expect = {}
    for b in range(0, 4096, 3):
        keys = [b"%d-%d" % (b, i) for i in range(b % 4)]
        vals = [None if i == 1 else b"v%d" % i for i in range(b % 4)]
        w.add_bin(b, keys, vals)
        expect[b] = (keys, vals)
    loc = Location.of(tmp_path) / "o.arrow"
    loc.write_bytes(w.to_bytes())
    r = ObjectReader(loc)
    assert r._reader.num_record_batches < len(expect) // 4
    assert all(r.bin_changes(b) == kv for b, kv in expect.items())
    assert r.bin_changes(1) == ([], [])
    r.close()


@pytest.mark.parametrize("chunk, chunk_bytes", [(1, 2 << 20), (3, 2 << 20), (10, 2 << 20), (65_536, 2 << 20),
                                                (65_536, 40), (10, 25), (65_536, 1)])
def test_add_bins_writes_the_object_add_bin_writes(monkeypatch, chunk, chunk_bytes):
    import spark_jobs.objects as D

    monkeypatch.setattr(D, "CHUNK_ROWS", chunk)
    monkeypatch.setattr(D, "CHUNK_BYTES", chunk_bytes)
    for seed in range(50):
        r = random.Random(seed)
        one, many = ObjectWriter(meta={}), ObjectWriter(meta={})
        nxt = 0
        for _ in range(r.randrange(1, 4)):  # several calls, each many bins with 1..15 rows
            bins = sorted(r.sample(range(nxt, nxt + 50), r.randrange(1, 10)))
            nxt = bins[-1] + 1
            rows = [(b, b"%d-%d" % (b, i), None if r.random() < 0.2 else b"v")
                    for b in bins for i in range(r.choice([1, 2, 5, 15]))]
            for b in bins:
                one.add_bin(b, [k for x, k, _ in rows if x == b], [v for x, _, v in rows if x == b])
            many.add_bins([x for x, _, _ in rows], [k for _, k, _ in rows], [v for _, _, v in rows])
        assert many.to_bytes() == one.to_bytes()
    with pytest.raises(ValueError):
        many.add_bins([nxt - 1], [b"k"], [b"v"])


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


def test_objects_chunk_by_bytes_too(tmp_path, monkeypatch):
    """Large values: a batch holds at most CHUNK_BYTES (a bin above it gets a batch of its own), so
    reading one bin does not read tens of MB of its neighbours."""
    import spark_jobs.objects as D

    monkeypatch.setattr(D, "CHUNK_BYTES", 1000)
    w = ObjectWriter(meta={})
    expect = {}
    for b in range(40):
        n = 5 if b != 7 else 30  # bin 7 alone is larger than a chunk
        keys = [b"%02d-%d" % (b, i) for i in range(n)]
        vals = [b"x" * 60 for _ in range(n)]
        w.add_bin(b, keys, vals)
        expect[b] = (keys, vals)
    loc = Location.of(tmp_path) / "o.arrow"
    loc.write_bytes(w.to_bytes())
    r = ObjectReader(loc)
    sizes = [r._reader.get_batch(i) for i in range(r._reader.num_record_batches)]
    big = r._index[7][0]
    assert all(rb.nbytes < 1500 for i, rb in enumerate(sizes) if i != big) and sizes[big].num_rows == 30
    assert len(sizes) >= 40 * 5 * 64 // 1000
    assert all(r.bin_changes(b) == kv for b, kv in expect.items())
    r.close()


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


def test_a_cache_numbered_above_the_job_is_emptied_and_rebuilt(tmp_path):
    hz = Harness(tmp_path, workers=2)
    for e in range(3):
        hz.run_epoch(keys_of(200, e))
    c = WorkerCache(tmp_path / "exec-a", hz.ds.store_id, "j", 0)
    c.write(lambda txn: txn.put(b"bits", struct.pack(">I", K + 3), db=c.meta))  # never written by a real run
    c.close()
    hz.run_epoch(keys_of(200, 3))
    assert hz.durable_counts() == dict(hz.ref)
    _check_counters(hz, 0, "exec-a")


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


def test_store_and_cache_refuse_another_jobs_state(tmp_path):
    DurableState(str(tmp_path / "s"), "j", 8)
    with pytest.raises(StoreMismatch, match="belongs to job 'j'"):
        DurableState(str(tmp_path / "s"), "other", 8)
    with pytest.raises(StoreMismatch):
        DurableState(str(tmp_path / "s"), "j", 16)
    WorkerCache(tmp_path / "c", "store1", "j", 0).close()
    (tmp_path / "c" / "store-store1" / "worker-0000").rename(tmp_path / "c" / "store-store1" / "worker-0001")
    with pytest.raises(CacheError, match="belongs to"):
        WorkerCache(tmp_path / "c", "store1", "j", 1)


def test_rolled_back_checkpoint_and_missing_task_output_are_errors(tmp_path):
    hz = Harness(tmp_path, workers=2, snapshot_every=2)
    for e in range(8):
        hz.run_epoch(keys_of(50, e))
    hz.ds.check_against(7)  # Spark committed everything: fine
    hz.ds.check_against(6)  # the last epoch's commit lost in a crash: a replay, fine
    with pytest.raises(StateGap, match="rolled back"):
        hz.ds.check_against(3)
    with pytest.raises(StateGap, match="no changelog object"):
        hz.ds.commit_epoch(99, hz.version, 2, False)


def test_cache_grows_its_map_instead_of_sticking(tmp_path, monkeypatch):
    import spark_jobs.cache as C

    monkeypatch.setattr(C, "INITIAL_MAP", 1 << 20)  # 1 MiB
    c = WorkerCache(tmp_path, "s", "j", 0)
    try:
        c.write(lambda txn: [txn.put(struct.pack(">Q", i) + b"\x00", b"x" * 1000, db=c.data) for i in range(5000)])
        assert c.env.info()["map_size"] > 1 << 20
    finally:
        c.close()


def test_objects_of_format_1_are_still_read(tmp_path):
    import json as _json

    from spark_jobs.objects import META_KEY, PUT, SCHEMA

    def batch(b: int, keys: list[bytes]) -> pa.RecordBatch:
        n = len(keys)
        return pa.RecordBatch.from_arrays([pa.array([PUT] * n, pa.int8()), pa.array([b] * n, pa.int32()),
                                           pa.array(keys, pa.binary()), pa.array([b"v"] * n, pa.binary()),
                                           pa.nulls(n, pa.string())], schema=SCHEMA)

    schema = SCHEMA.with_metadata({META_KEY: _json.dumps({"format": 1, "bins": [2, 5], "outputs_batch": -1}).encode()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as w:
        w.write_batch(batch(2, [b"a", b"b"]))
        w.write_batch(batch(5, [b"c"]))
    loc = Location.of(tmp_path) / "old.arrow"
    loc.write_bytes(sink.getvalue().to_pybytes())
    r = ObjectReader(loc)
    assert r.bin_changes(2) == ([b"a", b"b"], [b"v", b"v"]) and r.bin_changes(5) == ([b"c"], [b"v"])
    r.close()


def test_retention_asks_before_it_deletes_and_a_refusal_deletes_nothing(tmp_path, monkeypatch):
    """The driver's token check runs before retention deletes anything (and only then): a stale
    driver's refused check leaves every epoch's objects in place."""
    hz = Harness(tmp_path, workers=2, snapshot_every=1)
    monkeypatch.setattr(hz.ds, "retain", lambda *a: 0)  # the harness's own retention: off while epochs pile up
    for e in range(6):
        hz.run_epoch(keys_of(100, e))
    monkeypatch.undo()
    epoch0 = Location.of(hz.uri) / "changelog" / "000000000000"
    kept = [e.epoch for e in hz.ds.entries]

    class Refused(RuntimeError):
        pass

    def refuse() -> None:
        raise Refused("a newer driver took over")

    with pytest.raises(Refused):
        hz.ds.retain(refuse)
    assert epoch0.exists() and [e.epoch for e in hz.ds.entries] == kept
    asked: list[int] = []
    dropped = hz.ds.retain(lambda: asked.append(1))
    assert asked == [1] and dropped > 0 and not epoch0.exists()
    assert hz.ds.retain(refuse) == 0  # nothing left to delete: no check needed
    assert hz.durable_counts() == dict(hz.ref)
