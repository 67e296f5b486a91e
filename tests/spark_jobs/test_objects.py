"""spark_jobs.objects: one task attempt's object reads back exactly what was written, one bin at a
time and in bounded batches (by rows and by bytes), whichever way bins were added; format-1
objects still read; names sort by epoch, worker and attempt."""

from __future__ import annotations

import random
import re

import pyarrow as pa
import pytest

from spark_jobs.objects import (
    DEAD_LETTER,
    OUTPUT,
    ObjectReader,
    ObjectWriter,
    epoch_name,
    new_attempt_id,
    object_name,
    read_meta,
)
from spark_jobs.storage import Location

pytestmark = pytest.mark.dataplane


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


def test_names_sort_by_epoch_worker_and_attempt():
    assert epoch_name(3) == "000000000003" and epoch_name(10**11) == "100000000000"
    assert object_name(7, "s1a0-x") == "w0007-s1a0-x.arrow"
    a, b = new_attempt_id(4, 1), new_attempt_id(4, 1)
    assert re.fullmatch(r"s4a1-[0-9a-f]{10}", a) and a != b
    assert sorted([epoch_name(e) for e in (10, 9, 100)]) == [epoch_name(e) for e in (9, 10, 100)]


def test_an_object_without_changes_or_outputs_reads_empty(tmp_path):
    w = ObjectWriter(meta={"epoch": 1, "worker": 2})
    w.add_bins([], [], [])  # no rows: nothing added
    loc = Location.of(tmp_path) / "o.arrow"
    loc.write_bytes(w.to_bytes())
    meta = read_meta(loc)
    assert meta["epoch"] == 1 and meta["worker"] == 2 and meta["format"] == 2 and meta["outputs_batch"] == -1
    r = ObjectReader(loc)
    assert r.bins == [] and r.bin_changes(4) == ([], []) and r.outputs() == []
    r.close()


def test_bins_out_of_order_are_refused_by_add_bins_too():
    w = ObjectWriter(meta={})
    with pytest.raises(ValueError, match="increasing order"):
        w.add_bins([1, 0], [b"a", b"b"], [b"1", b"2"])
    w.add_bins([2, 2, 3], [b"a", b"b", b"c"], [b"1", None, b"3"])
    with pytest.raises(ValueError, match=r"\(3 after 3\)"):
        w.add_bin(3, [b"d"], [b"4"])


def test_the_same_changes_give_the_same_bytes():
    def build() -> bytes:
        w = ObjectWriter(meta={"epoch": 5, "worker": 0})
        w.add_bin(1, [b"a"], [b"1"])
        w.add_bins([3, 3], [b"b", b"c"], [None, b"2"])
        w.add_output(OUTPUT, b"a", b"1")
        w.add_output(DEAD_LETTER, b"x", b"bad", '{"reason": "r"}')
        return w.to_bytes()

    first = build()
    assert build() == first
    assert pa.ipc.open_file(pa.BufferReader(first)).num_record_batches == 2  # the changes, then the outputs


def test_an_empty_bin_last_is_listed_and_reads_empty(tmp_path):
    """A bin with no rows after the last batch: the object covers it (a snapshot's empty bin must
    not send a reader further back in history) and reading it needs no batch."""
    w = ObjectWriter(meta={"epoch": 2})
    w.add_bin(1, [b"a"], [b"1"])
    w.add_bin(3, [], [])
    loc = Location.of(tmp_path) / "o.arrow"
    loc.write_bytes(w.to_bytes())
    r = ObjectReader(loc)
    assert r.bins == [1, 3]
    assert r.bin_changes(3) == ([], []) and r.bin_changes(1) == ([b"a"], [b"1"])
    r.close()
    alone = ObjectWriter(meta={"epoch": 2})
    alone.add_bin(0, [], [])
    loc.write_bytes(alone.to_bytes())
    r = ObjectReader(loc)
    assert r.bins == [0] and r.bin_changes(0) == ([], [])
    r.close()
