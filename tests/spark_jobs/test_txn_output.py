"""Transactional output (spark_jobs.txn_output, the JVM writer io.ballast.sink.TxnKafkaSink):
marker encoding and naming (pure), and through the test session's local Spark against the real
broker: a zombie attempt of a slot is fenced and its records never become visible to
read_committed; a replay of a committed (epoch, worker) writes nothing; an executor's kept
producer that another one fenced finds out at its commit and the retry reads the marker instead of
writing twice; a slot without records writes no marker."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError
from kafka.partitioner.default import murmur2

from ballast.topics import create_missing_topics
from spark_jobs import txn_output as tx
from spark_jobs import txn_slots as txs
from spark_jobs.output import ID_HEADER, OUTPUT_SCHEMA, output_records, scan_topic
from spark_jobs.run_config import COMMITS_TOPIC_CONFIG
from spark_jobs.txn_output import commits_topic
from spark_jobs.txn_slots import Marker, TxnTarget, transactional_id

Rec = tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]


def test_transactional_id_and_marker_topic_names() -> None:
    assert transactional_id("orders", "keycount", 3) == "ballast.orders.keycount.w3"
    assert transactional_id("orders", "keycount", 3) != transactional_id("orders", "keycount", 4)
    assert transactional_id("a", "op", 0) != transactional_id("b", "op", 0)
    assert commits_topic("orders.output") == "orders.output.commits"
    assert commits_topic("orders.enrich.out") == "orders.enrich.out.commits"  # a chain's hand-off


def test_marker_round_trip_and_what_it_covers() -> None:
    m = Marker("store-1", 7, 2)
    assert Marker.decode(m.value()) == m
    assert m.key() == b"w2"
    assert m.value() == b'{"epoch":7,"store":"store-1","worker":2}'  # canonical: sorted keys, no spaces
    for junk in (None, b"", b"not json", b"{}", b'{"store": "s", "epoch": "x", "worker": 0}', b"[1]"):
        assert Marker.decode(junk) is None
    # markers of one slot are written in epoch order: the last one covers itself and every epoch before
    assert m.covers("store-1", 7) and m.covers("store-1", 3)
    assert not m.covers("store-1", 8)
    # another deployment (a new store under the same job name) never counts as committed
    assert not m.covers("store-2", 3)


def test_output_records_are_the_spark_rows() -> None:
    """The transactional writer sends exactly the records Spark's sink would (same ids, headers)."""
    from spark_jobs.objects import DEAD_LETTER, OUTPUT
    from spark_jobs.output import kafka_rows

    outs = [(OUTPUT, b"k", b"1", None), (DEAD_LETTER, b"k2", b"v", '{"reason": "operator-error", "error": "E"}')]
    recs = output_records(4, 1, outs, "j.output", "j.dlq")
    assert [r[0] for r in recs] == ["j.output", "j.dlq"]
    assert recs[0][3] == [(ID_HEADER, b"4:1:0")] and recs[1][3][0] == (ID_HEADER, b"4:1:1")
    rows = kafka_rows(4, 1, outs, "j.output", "j.dlq").to_pylist()
    assert [(r["topic"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]]) for r in rows] == recs


@pytest.fixture(autouse=True)
def _close_kept_clients(request):  # type: ignore[no-untyped-def]
    """The producers the local JVM kept for each test's slots are closed after it (before the
    session's broker stops: a kept client logs connection errors until the JVM ends)."""
    yield
    if "spark" in request.fixturenames:
        tx.close_clients(request.getfixturevalue("spark"))


def _stats(spark) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """The local JVM's writer counters (io.ballast.sink.TxnKafkaSink.stats)."""
    return {str(k): int(v) for k, v in dict(spark._jvm.io.ballast.sink.TxnKafkaSink.stats()).items()}


def _topics(bootstrap: str, name: str) -> tuple[str, str]:
    out, marks = f"{name}.output", commits_topic(f"{name}.output")
    create_missing_topics(bootstrap, {out: 2, marks: 4}, configs={marks: COMMITS_TOPIC_CONFIG})
    return out, marks


def _read(bootstrap: str, topic: str, isolation: str) -> list[tuple[bytes | None, bytes | None]]:
    return sorted(((m.key, m.value) for m in scan_topic(bootstrap, topic, 30.0, isolation_level=isolation,
                                                       consumer_timeout_ms=1000)), key=repr)


def _target(bootstrap: str, name: str, marks: str, store: str = "store-A") -> TxnTarget:
    return TxnTarget(bootstrap=bootstrap, job=name, operator="keycount", store_id=store, commits_topic=marks,
                     outage_s=20.0)


def _write(spark, t: TxnTarget, epoch: int, by_slot: dict[int, list[Rec]]) -> None:  # type: ignore[no-untyped-def]
    """One epoch's write as the keyed stage makes it: task (partition) w holds worker slot w's records."""
    slots = max(by_slot) + 1
    rows = {w: [(topic, key, value, [{"key": k, "value": v} for k, v in headers])
                for topic, key, value, headers in recs] for w, recs in by_slot.items()}
    rdd = spark.sparkContext.parallelize(range(slots), slots).flatMap(lambda w: rows.get(w, []))
    tx.writer(spark.createDataFrame(rdd, OUTPUT_SCHEMA), epoch, t, {}).save()



@pytest.mark.dataplane
@pytest.mark.services
def test_a_zombie_attempt_is_fenced_and_its_records_never_visible(spark, kafka_bootstrap, unique_name):
    """Attempt A of (epoch 5, worker 1) starts its transaction and pauses; attempt B of the same slot
    (the JVM writer) initialises the same transactional id (fencing A), finds no marker, commits.
    A's commit fails with a fencing error; read_committed shows B's records and marker once, A's
    never (a read_uncommitted reader does see A's copy: the test is not vacuous)."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    tid = transactional_id(unique_name, "keycount", 1)
    a = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid, acks="all")
    a.init_transactions()
    a.begin_transaction()
    a.send(out, key=b"k", value=b"zombie", headers=[(ID_HEADER, b"5:1:0")])
    a.send(marks, key=b"w1", value=Marker("store-A", 5, 1).value(), partition=1)
    a.flush()  # A's records are in the log, its transaction open: a paused attempt
    t = _target(kafka_bootstrap, unique_name, marks)
    recs: list[Rec] = [(out, b"k", b"live", [(ID_HEADER, b"5:1:0")])]
    _write(spark, t, 5, {1: recs})  # B: its init fenced A (and aborted A's transaction)
    with pytest.raises(KafkaError) as err:
        a.commit_transaction()
    assert "ProducerFenced" in repr(err.value) or "InvalidProducerEpoch" in repr(err.value), repr(err.value)
    a.close(timeout=0)
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"live")]
    assert (b"k", b"zombie") in _read(kafka_bootstrap, out, "read_uncommitted")
    assert txs.read_last_marker(t, 1) == Marker("store-A", 5, 1)
    # a replay of the epoch (the executor kept the slot: it knows its marker) writes nothing
    _write(spark, t, 5, {1: [(out, b"k", b"replayed", [(ID_HEADER, b"5:1:0")])]})
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"live")]
    # another deployment under the same job name (a new store) is not covered by the old marker
    _write(spark, _target(kafka_bootstrap, unique_name, marks, "store-B"), 5, {1: [(out, b"k", b"new", [])]})
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"live"), (b"k", b"new")]
    assert txs.read_last_marker(t, 1) == Marker("store-B", 5, 1)


@pytest.mark.dataplane
@pytest.mark.services
def test_a_kept_producer_fenced_by_another_attempt_retries_and_writes_once(spark, kafka_bootstrap, unique_name):
    """Slot 0's producer is kept by the executor after epoch 1. Another attempt (here: another
    producer of the id) takes the slot and commits epoch 2. The kept producer, asked for epoch 2
    again, believes the slot at epoch 1: the broker refuses its transaction (fenced), the writer
    starts over with a new producer, reads the marker (epoch 2) and writes nothing. Epoch 3 then
    commits once. read_committed: each epoch's record once, the markers in epoch order."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    rec = {e: [(out, b"k", b"%d" % e, [(ID_HEADER, b"%d:0:0" % e)])] for e in (1, 2, 3)}
    _write(spark, t, 1, {0: rec[1]})
    other = KafkaProducer(bootstrap_servers=kafka_bootstrap,
                          transactional_id=transactional_id(unique_name, "keycount", 0))
    other.init_transactions()
    other.begin_transaction()
    other.send(out, key=b"k", value=b"2", headers=[(ID_HEADER, b"2:0:0")])
    m2 = Marker("store-A", 2, 0)
    other.send(marks, key=m2.key(), value=m2.value(), partition=0)
    other.commit_transaction()
    other.close()
    before = _stats(spark)
    _write(spark, t, 2, {0: [(out, b"k", b"2-again", [(ID_HEADER, b"2:0:0")])]})
    after = _stats(spark)
    assert {k: after[k] - before[k] for k in after} == {"inits": 1, "commits": 0, "skips": 1, "retries": 0,
                                                       "fenced": 1}, "not fenced, re-initialised and skipped"
    _write(spark, t, 3, {0: rec[3]})
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"1"), (b"k", b"2"), (b"k", b"3")]
    assert [Marker.decode(v).epoch for _, v in _read(kafka_bootstrap, marks, "read_committed")  # type: ignore[union-attr]
            ] == [1, 2, 3]


@pytest.mark.dataplane
@pytest.mark.services
def test_the_last_marker_is_found_behind_many_aborted_attempts(spark, kafka_bootstrap, unique_name):
    """Aborted transactions leave records only read_uncommitted sees: the marker read (the writer's,
    after a fence, and the driver's) widens its window past them to the last committed marker, so a
    replay of the committed epoch still writes nothing."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    _write(spark, t, 1, {2: [(out, b"k", b"1", [])]})
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=transactional_id(unique_name,
                                                                                            "keycount", 2))
    p.init_transactions()  # fences the executor's kept producer
    for e in range(2, 32):  # 30 aborted attempts: 60 offsets after the committed marker
        p.begin_transaction()
        p.send(marks, key=b"w2", value=Marker("store-A", e, 2).value(), partition=2)
        p.abort_transaction()
    p.close()
    assert txs.read_last_marker(t, 2) == Marker("store-A", 1, 2)
    assert txs.read_last_marker(t, 3) is None  # a slot that never committed
    _write(spark, t, 1, {2: [(out, b"k", b"1-again", [])]})
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"1")]


@pytest.mark.dataplane
@pytest.mark.services
def test_the_marker_topic_grows_a_partition_per_task_slot(spark, kafka_bootstrap, unique_name):
    """An epoch with more task slots than the marker topic has partitions (a pre-copy warming a new
    worker, a W raised past 8) gets them before its tasks run, and the new slot commits there; a
    slot with no records writes no marker (its replay has none either)."""
    out, marks = _topics(kafka_bootstrap, unique_name)  # 4 partitions
    # enough already: nothing is created (a just-created topic's metadata may list fewer: a lower bound)
    assert 3 <= tx.ensure_commit_partitions(kafka_bootstrap, marks, 3, {}) <= 4
    assert tx.ensure_commit_partitions(kafka_bootstrap, marks, 10, {}) == 10
    t = _target(kafka_bootstrap, unique_name, marks)
    _write(spark, t, 1, {9: [(out, b"k", b"1", [])], 3: []})
    assert txs.read_last_marker(t, 9) == Marker("store-A", 1, 9)
    assert [Marker.decode(v) for _, v in _read(kafka_bootstrap, marks, "read_uncommitted")] == [Marker("store-A", 1, 9)]


@pytest.mark.dataplane
@pytest.mark.services
def test_records_are_written_as_given_on_their_keys_partitions(spark, kafka_bootstrap, unique_name):
    """A record with neither key nor value (the dead letter of a (null, null) record, or of one too
    large to carry its payload) lands null and null with its headers; keyed records land on the
    partition Kafka's default partitioner gives (murmur2, as Spark's sink and kafka-python compute
    it: the at-least-once mode's choice), 40 keys over 2 partitions."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    recs: list[Rec] = [(out, None, None, [("ballast-reason", b"null-key")]), (out, b"k", None, []),
                       (out, None, b"v", [])]
    recs += [(out, b"key-%d" % i, b"%d" % i, [(ID_HEADER, b"1:0:%d" % i)]) for i in range(40)]
    _write(spark, _target(kafka_bootstrap, unique_name, marks), 1, {0: recs})
    got = list(scan_topic(kafka_bootstrap, out, 30.0, isolation_level="read_committed", consumer_timeout_ms=1000))
    assert sorted(((m.key, m.value) for m in got), key=repr) == sorted(((r[1], r[2]) for r in recs), key=repr)
    assert [dict(m.headers) for m in got if m.key is None and m.value is None] == [{"ballast-reason": b"null-key"}]
    keyed = [m for m in got if m.key is not None and m.key.startswith(b"key-")]
    assert {m.partition for m in keyed} == {0, 1}
    assert all(m.partition == (murmur2(m.key) & 0x7FFFFFFF) % 2 for m in keyed)
    assert all(dict(m.headers)[ID_HEADER] == b"1:0:" + m.value for m in keyed)


@pytest.mark.dataplane
@pytest.mark.services
def test_rows_the_writer_cannot_write_are_refused_saying_what_is_missing(spark, kafka_bootstrap, unique_name):
    out, marks = _topics(kafka_bootstrap, unique_name)
    rows = spark.range(1).selectExpr("'t' AS topic", "CAST('v' AS BINARY) AS value")
    with pytest.raises(Exception, match="needs a column key"):
        tx.writer(rows, 1, _target(kafka_bootstrap, unique_name, marks), {}).save()


@pytest.mark.dataplane
@pytest.mark.services
def test_a_transaction_with_a_failed_send_is_never_committed(spark, kafka_bootstrap, unique_name):
    """One record of a task's transaction fails its send (larger than the producer takes: the
    client refuses it, as it fails a batch it expired): the writer never commits that transaction
    (a commit would show the marker with a record missing, and no replay would ever write it); it
    starts over with new producers until the outage budget is spent, then fails the task saying
    why. Nothing of the (epoch, worker) is visible to read_committed, its marker neither; the
    epoch's replay without that record commits the others once."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = TxnTarget(bootstrap=kafka_bootstrap, job=unique_name, operator="keycount", store_id="store-A",
                  commits_topic=marks, outage_s=1.0)
    recs: list[Rec] = [(out, b"k%d" % i, b"%d" % i, []) for i in range(3)] + [(out, b"big", b"x" * 200_000, [])]
    df = spark.createDataFrame(spark.sparkContext.parallelize([(*r[:3], []) for r in recs], 1), OUTPUT_SCHEMA)
    before = _stats(spark)
    with pytest.raises(Exception, match=r"transactional output of epoch 1 worker 0 failed for 1 s"):
        tx.writer(df, 1, t, {"kafka.max.request.size": "100000"}).save()
    after = _stats(spark)
    assert after["commits"] == before["commits"] and after["retries"] > before["retries"]
    assert _read(kafka_bootstrap, out, "read_committed") == []
    assert _read(kafka_bootstrap, marks, "read_committed") == []
    _write(spark, t, 1, {0: recs[:3]})
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k%d" % i, b"%d" % i) for i in range(3)]
    assert txs.read_last_marker(t, 0) == Marker("store-A", 1, 0)


@pytest.mark.dataplane
@pytest.mark.services
def test_a_warm_up_write_opens_the_slots_and_writes_nothing(spark, kafka_bootstrap, unique_name):
    """The job's warm-up routes a row per worker into the writer with `warm`: every slot's producer
    is opened (init, marker read) and kept, nothing is written, no marker either; the first epoch
    then commits on the kept producers, opening none."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    before = _stats(spark)
    rows = spark.createDataFrame(spark.sparkContext.parallelize([(out, b"k", b"tick", [])] * 2, 2), OUTPUT_SCHEMA)
    tx.writer(rows, -1, t, {}).option("warm", "true").save()
    warmed = _stats(spark)
    assert warmed["inits"] - before["inits"] == 2 and warmed["commits"] == before["commits"]
    assert _read(kafka_bootstrap, out, "read_uncommitted") == []
    assert _read(kafka_bootstrap, marks, "read_uncommitted") == []
    _write(spark, t, 1, {0: [(out, b"a", b"1", [])], 1: [(out, b"b", b"1", [])]})
    after = _stats(spark)
    assert after["inits"] == warmed["inits"] and after["commits"] - warmed["commits"] == 2
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"a", b"1"), (b"b", b"1")]
