"""Record shapes on one worker, without Spark: which rows the operator gets and which become dead
letters (spark_jobs.records), through the real fold (spark_jobs.worker.fold_rows) and LMDB cache."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow as pa
import pytest

from spark_jobs.bins import bin_of_hash
from spark_jobs.cache import WorkerCache
from spark_jobs.objects import DEAD_LETTER, OUTPUT, ObjectWriter
from spark_jobs.output import kafka_rows
from spark_jobs.processor import StatefulProcessor, query
from spark_jobs.records import (
    DECODE_ERROR,
    NULL_KEY,
    NULL_VALUE,
    OPERATOR_ERROR,
    REJECT_COLUMN,
    TIME_OUT_OF_RANGE,
    RowRejected,
    decode_row,
    source_of,
    split_rejected,
)
from spark_jobs.worker import ApplyConfig, fold_rows

K = 2


def _table(keys: list[bytes | None], values: list[bytes | None], rejects: list[str | None] | None = None,
           partitions: list[int] | None = None) -> pa.Table:
    n = len(keys)
    hs = [(hash(k) & ((1 << 63) - 1)) if k is not None else 42 for k in keys]
    cols = {"key": pa.array(keys, pa.binary()), "value": pa.array(values, pa.binary()),
            "partition": pa.array(partitions or [0] * n, pa.int32()), "offset": pa.array(range(n), pa.int64())}
    if rejects is not None:
        cols[REJECT_COLUMN] = pa.array(rejects, pa.string())
    cols.update(h=pa.array(hs, pa.int64()), bin=pa.array([bin_of_hash(h, K) for h in hs], pa.int32()),
                worker=pa.array([0] * n, pa.int32()))
    return pa.table(cols)


def test_split_rejected_keeps_keyed_rows_and_names_the_reason():
    t = _table([b"a", None, b"", None], [b"1", None, b"", b"{oops"], [None, None, None, DECODE_ERROR],
               partitions=[1, 3, 0, 2])
    kept, dead = split_rejected(t, ["in"])
    assert kept.column("key").to_pylist() == [b"a", b""] and REJECT_COLUMN not in kept.column_names
    notes = [json.loads(n) for _, _, n in dead]
    # in (partition, offset) order, whatever order the shuffle delivered them in
    assert [(n["reason"], n["topic"], n["partition"], n["offset"]) for n in notes] == [
        (DECODE_ERROR, "in", 2, 3), (NULL_KEY, "in", 3, 1)]
    assert [v for _, v, _ in dead] == [b"{oops", None] and all(n["error"] for n in notes)


def test_split_rejected_names_the_real_topic_of_a_join_input():
    t = _table([None], [b"x"], partitions=[5 * 2 + 1])  # partition 5 of the second of two inputs
    _, dead = split_rejected(t, ["left", "right"])
    assert json.loads(dead[0][2])["topic"] == "right" and json.loads(dead[0][2])["partition"] == 5
    assert source_of(["only"], 7, 9) == ("only", 7, 9)


def test_decode_row_converts_timestamps_and_rejects_what_python_cannot_hold():
    d, et = decode_row(b'{"user":"a","ts":1000}', ("ts",), "ts")
    assert et == 1000 and d["user"] == "a" and d["ts"].year in (1969, 1970)
    d, et = decode_row(b'{"user":"a","ts":null}', ("ts",), "ts")
    assert et is None and d["ts"] is None
    with pytest.raises(RowRejected) as exc:
        decode_row(b'{"ts": 253402300800000}', ("ts",), "ts")  # 10000-01-01: beyond datetime
    assert exc.value.reason == TIME_OUT_OF_RANGE and "'ts'" in str(exc.value)
    with pytest.raises(RowRejected) as exc:
        decode_row(b'{"ts": -62135596800001}', ("ts",))  # before year 1
    assert exc.value.reason == TIME_OUT_OF_RANGE
    for bad in (b"\xff\xfe", b"[1, 2]", b"not json"):
        with pytest.raises(RowRejected) as exc:
            decode_row(bad, ())
        assert exc.value.reason == DECODE_ERROR
    with pytest.raises(RowRejected) as exc:
        decode_row(b'{"ts": "soon"}', (), "ts")
    assert exc.value.reason == DECODE_ERROR


class Picky:
    """A fold that rejects values that are not UTF-8 (its own decoder) and counts the rest."""

    def fold(self, key, state, values):  # type: ignore[no-untyped-def]
        for v in values:
            if v is not None:
                v.decode()
        count = (int(state) if state else 0) + len(values)
        return b"%d" % count, [(key, b"%d" % count)]


def _fold(tmp_path, table: pa.Table, operator: str = "keycount", monkeypatch=None):  # type: ignore[no-untyped-def]
    cfg = ApplyConfig(epoch=1, job="j", operator=operator, bins_bits=K, workers=1, assignment=(0,) * (1 << K),
                      state_uri="", store_id="s", history=SimpleNamespace(), output_topic="j.output",
                      dlq_topic="j.dlq", input_topic="in")
    writer = ObjectWriter(meta={"epoch": 1})
    with WorkerCache(tmp_path, "s", "j", 0) as cache:
        def run(txn):  # type: ignore[no-untyped-def]
            cache.ensure_bits(txn, K, K)
            return fold_rows(cfg, cache, txn, table, table.num_rows, writer)
        dead, _ = cache.write(run)
    return cfg, dead, writer.outputs


def test_fold_counts_every_shape_with_a_key_and_dead_letters_a_null_one(tmp_path):
    big = b"k" * (3 << 20)  # a 3 MB key: stored under its SHA-256, the full key kept in the value
    t = _table([None, b"v", b"", b"\xff\xfe", big, b"a", b"a"], [None, b"v", b"", b"\x00\xff", b"x" * 10, None, b""])
    cfg, dead, outs = _fold(tmp_path, t)
    assert dead == 1
    dl = [(k, v, json.loads(n)) for kind, k, v, n in outs if kind == DEAD_LETTER]
    assert [(k, v, n["reason"], n["offset"]) for k, v, n in dl] == [(None, None, NULL_KEY, 0)]
    counts = {k: int(v) for kind, k, v, _ in outs if kind == OUTPUT}
    # a tombstone with a key (b"a", None) is a record like any other
    assert counts == {b"v": 1, b"": 1, b"\xff\xfe": 1, big: 1, b"a": 2}
    # what the Kafka writer gets: the reason and the source in headers
    rb = kafka_rows(cfg.epoch, 0, outs, cfg.output_topic, cfg.dlq_topic)
    row = [r for r in rb.to_pylist() if r["topic"] == "j.dlq"][0]
    hdr = {h["key"]: h["value"] for h in row["headers"]}
    assert hdr["ballast-reason"] == NULL_KEY.encode() and hdr["ballast-source"] == b"in:0:0"
    assert hdr["ballast-id"] == b"1:0:0" and row["key"] is None


def test_fold_dead_letters_what_the_operators_decoder_rejects(tmp_path, monkeypatch):
    import spark_jobs.operators as ops

    monkeypatch.setitem(ops.OPERATORS, "picky", Picky)
    t = _table([b"a", b"a", b"b"], [b"ok", b"\xc3\x28", b"fine"])
    _, dead, outs = _fold(tmp_path, t, "picky")
    dl = [json.loads(n) for kind, _, _, n in outs if kind == DEAD_LETTER]
    assert dead == 1 and dl[0]["reason"] == OPERATOR_ERROR and "UnicodeDecodeError" in dl[0]["error"]
    assert dl[0]["offset"] == 1
    assert sorted((k, v) for kind, k, v, _ in outs if kind == OUTPUT) == [(b"a", b"1"), (b"b", b"1")]


def test_only_rejected_rows_give_an_empty_fold(tmp_path):
    _, dead, outs = _fold(tmp_path, _table([None, None], [None, b"x"], [NULL_VALUE, None]))
    assert dead == 2 and [json.loads(n)["reason"] for *_, n in outs] == [NULL_VALUE, NULL_KEY]


Sessions = query(StatefulProcessor, input_schema="user STRING, ts TIMESTAMP, amount INT", grouping_keys=("user",),
                 time_mode="EventTime", event_time_column="ts", where="amount > 0")


@pytest.mark.dataplane
def test_processor_keyed_rejects_what_its_input_schema_cannot_parse(spark):
    """JVM side, before routing: a tombstone or a value that does not parse is not a row of nulls
    (which would have grouped every bad record under one key): a null key, the raw value and the
    reason; the user's `where` filters only the rows that parsed."""
    from spark_jobs.processing import ProcessorOperator

    op = ProcessorOperator(Sessions)
    rows = [(b"k", b'{"user":"a","ts":1,"amount":1}'), (b"k", None), (None, b"{oops"), (b"k", b"\xff\xfe"),
            (b"k", b'{"user":"b","ts":2,"amount":0}'), (b"k", b'{"user":"c","ts":253402300800,"amount":2}'),
            (b"k", b'{"user":"d","ts":"soon","amount":3}'), (b"k", b'[1,2]')]
    df = spark.createDataFrame([(k, v, 0, i) for i, (k, v) in enumerate(rows)],
                               "key binary, value binary, partition int, offset long")
    out = {r["offset"]: r for r in op.keyed(df).collect()}
    assert sorted(out) == [0, 1, 2, 3, 5, 6, 7], "only the parsed row that fails `where` is filtered"
    reasons = {o: r[REJECT_COLUMN] for o, r in out.items()}
    assert reasons == {0: None, 1: NULL_VALUE, 2: DECODE_ERROR, 3: DECODE_ERROR, 5: None, 6: DECODE_ERROR,
                       7: DECODE_ERROR}
    assert all(out[o]["key"] is None and out[o]["value"] == rows[o][1] for o in (1, 2, 3, 6, 7))
    assert json.loads(out[0]["key"]) == {"user": "a"} and json.loads(out[0]["value"])["ts"] == 1000
    assert op.task_conf() == {"ts_columns": ["ts"]}
    # year 10000 parses in the JVM but no Python datetime holds it: the worker dead-letters it
    with pytest.raises(RowRejected) as exc:
        decode_row(out[5]["value"], ("ts",), "ts")
    assert exc.value.reason == TIME_OUT_OF_RANGE
    # the schema as a struct type string works the same
    op2 = ProcessorOperator(query(StatefulProcessor, input_schema="struct<user:string>", grouping_keys=("user",)))
    got = {r["offset"]: r[REJECT_COLUMN] for r in op2.keyed(df.where("offset < 3")).collect()}
    assert got == {0: None, 1: NULL_VALUE, 2: DECODE_ERROR}
