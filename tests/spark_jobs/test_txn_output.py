"""Transactional output (spark_jobs.txn_output): marker encoding and naming (pure), and against the
real broker: a zombie attempt of a slot is fenced and its records never become visible to
read_committed; a replay of a committed (epoch, worker) writes nothing; a producer a newer one
fenced finds out at its commit and the retry reads the marker instead of writing twice."""

from __future__ import annotations

import logging

import pytest
from kafka import KafkaProducer
from kafka.errors import KafkaError

from ballast.topics import create_missing_topics
from spark_jobs import txn_output as tx
from spark_jobs import txn_slots as txs
from spark_jobs.output import ID_HEADER, output_records, scan_topic
from spark_jobs.run_config import COMMITS_TOPIC_CONFIG
from spark_jobs.txn_output import commits_topic
from spark_jobs.txn_slots import Marker, TxnTarget, transactional_id


def test_transactional_id_and_marker_topic_names() -> None:
    assert transactional_id("orders", "keycount", 3) == "ballast.orders.keycount.w3"
    assert transactional_id("orders", "keycount", 3) != transactional_id("orders", "keycount", 4)
    assert transactional_id("a", "op", 0) != transactional_id("b", "op", 0)
    assert commits_topic("orders.output") == "orders.output.commits"
    assert commits_topic("orders.enrich.out") == "orders.enrich.out.commits"  # a chain's hand-off


def test_record_batches_are_checksummed_in_c() -> None:
    """kafka-python computes each batch's CRC-32C with the `crc32c` package when it is installed, else in
    pure Python at a few MB/s (requirements.txt): every task's transactional output pays that."""
    from kafka.record import util

    assert util.crc32c_c is not None, "pip install the crc32c package (requirements.txt)"
    assert util.calc_crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value


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


def test_a_keyed_record_goes_where_kafkas_default_partitioner_puts_it() -> None:
    """`key_partition` is the producer's own partitioner for keyed records (Spark's sink uses the same
    murmur2), so transactional and at-least-once output put a key on the same partition."""
    import random

    from kafka.partitioner.default import DefaultPartitioner

    class Cluster:  # the partitioner's view of the metadata: n partitions, all available
        def __init__(self, n: int) -> None:
            self.n = n

        def topics(self) -> set[str]:
            return {"t"}

        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(range(self.n))

        available_partitions_for_topic = partitions_for_topic

    rnd = random.Random(7)
    keys = [b"", b"k", b"user-000042", "ключ".encode()] + [rnd.randbytes(rnd.randrange(1, 40)) for _ in range(300)]
    for n in (1, 2, 3, 8, 50):
        for k in keys:
            assert tx.key_partition(k, n) == DefaultPartitioner().partition("t", k, k, b"v", b"v", Cluster(n)), (k, n)
    assert tx.key_partition(None, 8) is None  # the producer picks, as it did before


def _topics(bootstrap: str, name: str) -> tuple[str, str]:
    out, marks = f"{name}.output", commits_topic(f"{name}.output")
    create_missing_topics(bootstrap, {out: 2, marks: 4}, configs={marks: COMMITS_TOPIC_CONFIG})
    return out, marks


def _read(bootstrap: str, topic: str, isolation: str) -> list[tuple[bytes | None, bytes | None]]:
    return sorted((m.key, m.value) for m in scan_topic(bootstrap, topic, 30.0, isolation_level=isolation,
                                                      consumer_timeout_ms=1000))


def _target(bootstrap: str, name: str, marks: str, store: str = "store-A") -> TxnTarget:
    return TxnTarget(bootstrap=bootstrap, job=name, operator="keycount", store_id=store, commits_topic=marks,
                     outage_s=20.0)


@pytest.fixture(autouse=True)
def _fresh_slots():
    """Every test starts with no producer or marker consumer cached in this process, and closes the
    ones it made (before the session's broker stops: an open client logs connection errors to the end)."""
    txs.close_clients()
    yield
    txs.close_clients()
    assert not txs._slots and not txs._consumers


def test_a_zombie_attempt_is_fenced_and_its_records_never_visible(kafka_bootstrap, unique_name):
    """Attempt A of (epoch 5, worker 1) starts its transaction and pauses; attempt B of the same slot
    initialises the same transactional id (fencing A), finds no marker, commits. A's commit fails
    with a fencing error; read_committed shows B's records and marker once, A's never (a
    read_uncommitted reader does see A's copy: the test is not vacuous)."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    tid = transactional_id(unique_name, "keycount", 1)
    a = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid, acks="all")
    a.init_transactions()
    a.begin_transaction()
    a.send(out, key=b"k", value=b"zombie", headers=[(ID_HEADER, b"5:1:0")])
    a.send(marks, key=b"w1", value=Marker("store-A", 5, 1).value(), partition=1)
    a.flush()  # A's records are in the log, its transaction open: a paused attempt
    t = _target(kafka_bootstrap, unique_name, marks)
    recs = [(out, b"k", b"live", [(ID_HEADER, b"5:1:0")])]
    assert tx.commit_outputs(t, 5, 1, recs) is True  # B: init fenced A (and aborted its transaction)
    with pytest.raises(KafkaError) as err:
        a.commit_transaction()
    assert tx.is_fenced(err.value), repr(err.value)
    a.close(timeout=0)
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"live")]
    assert (b"k", b"zombie") in _read(kafka_bootstrap, out, "read_uncommitted")
    assert _fresh_attempts_marker(t, 1) == Marker("store-A", 5, 1)
    # a replay of the epoch (a new process: nothing cached) finds the marker and writes nothing
    txs.drop(tid)
    assert tx.commit_outputs(t, 5, 1, recs) is False
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"live")]
    # another deployment under the same job name (a new store) is not covered by the old marker
    txs.drop(tid)
    assert tx.commit_outputs(_target(kafka_bootstrap, unique_name, marks, "store-B"), 5, 1,
                             [(out, b"k", b"new", [])]) is True
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"live"), (b"k", b"new")]


def test_a_cached_producer_fenced_by_another_process_retries_and_writes_once(kafka_bootstrap, unique_name, caplog):
    """Slot 0's producer is cached in this process after epoch 1. Another process (here: another
    producer of the id) takes the slot and commits epoch 2. This process's producer, asked for
    epoch 2 again, believes the slot at epoch 1: the broker refuses its transaction (fenced), it
    starts over with a new producer, reads the marker (epoch 2) and writes nothing. Epoch 3 then
    commits once. read_committed: each epoch's record once, the markers in epoch order."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    rec = {e: [(out, b"k", b"%d" % e, [(ID_HEADER, b"%d:0:0" % e)])] for e in (1, 2, 3)}
    assert tx.commit_outputs(t, 1, 0, rec[1]) is True
    other = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=transactional_id(unique_name,
                                                                                                "keycount", 0))
    other.init_transactions()
    other.begin_transaction()
    other.send(out, key=b"k", value=b"2", headers=[(ID_HEADER, b"2:0:0")])
    m2 = Marker("store-A", 2, 0)
    other.send(marks, key=m2.key(), value=m2.value(), partition=0)
    other.commit_transaction()
    other.close()
    retries = txs.stats["retries"]
    caplog.set_level(logging.WARNING, logger="ballast.txn_output")
    assert tx.commit_outputs(t, 2, 0, rec[2]) is False  # fenced, re-initialised, found epoch 2's marker
    assert txs.stats["retries"] == retries + 1
    # the one warning a zombie's late commit leaves (the cluster's zombie-executor test looks for it)
    assert [r.getMessage() for r in caplog.records if "was fenced" in r.getMessage()] == [
        "transactional output of epoch 2 worker 0: this attempt was fenced and another attempt committed the "
        "epoch; its 1 records stay aborted"]
    caplog.clear()
    assert tx.commit_outputs(t, 3, 0, rec[3]) is True
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"1"), (b"k", b"2"), (b"k", b"3")]
    assert [Marker.decode(v).epoch for _, v in _read(kafka_bootstrap, marks, "read_committed")] == [1, 2, 3]
    # a process on this host that takes the slot leaves its token in the owner file: the cached
    # producer is replaced before it tries a transaction the broker would refuse
    neighbour = txs._Slot(t, 0)  # what another Python worker process's first task of the slot does
    assert neighbour.last == Marker("store-A", 3, 0)
    assert txs._slots[transactional_id(unique_name, "keycount", 0)].superseded()
    retries = txs.stats["retries"]
    assert tx.commit_outputs(t, 3, 0, rec[3]) is False and txs.stats["retries"] == retries
    assert not [r for r in caplog.records if "was fenced" in r.getMessage()], "not fenced: a plain skip, no warning"
    neighbour.close()
    txs.drop(transactional_id(unique_name, "keycount", 0))
    assert _fresh_attempts_marker(t, 0) == Marker("store-A", 3, 0)
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k", b"1"), (b"k", b"2"), (b"k", b"3")]


def test_the_last_marker_is_found_behind_many_aborted_attempts(kafka_bootstrap, unique_name):
    """Aborted transactions leave records only read_uncommitted sees: the marker read widens its
    window past them to the last committed marker."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    assert tx.commit_outputs(t, 1, 2, [(out, b"k", b"1", [])]) is True
    txs.drop(transactional_id(unique_name, "keycount", 2))
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=transactional_id(unique_name,
                                                                                            "keycount", 2))
    p.init_transactions()
    for e in range(2, 32):  # 30 aborted attempts: 60 offsets after the committed marker
        p.begin_transaction()
        p.send(marks, key=b"w2", value=Marker("store-A", e, 2).value(), partition=2)
        p.abort_transaction()
    p.close()
    assert txs.read_last_marker(t, 2) == Marker("store-A", 1, 2)
    assert txs.read_last_marker(t, 3) is None  # a slot that never committed


def _fresh_attempts_marker(t: TxnTarget, worker: int) -> Marker | None:
    """What a new attempt of the slot reads: its init_transactions (which completes the transaction
    just committed: Kafka writes the commit's markers after the commit call returns, so a
    read_committed reader may not see them a moment before) and then the last marker."""
    tid = transactional_id(t.job, t.operator, worker)
    txs.drop(tid)
    try:
        return txs.slot(t, worker).last
    finally:
        txs.drop(tid)


def test_the_marker_topic_grows_a_partition_per_task_slot(kafka_bootstrap, unique_name):
    """An epoch with more task slots than the marker topic has partitions (a pre-copy warming a new
    worker, a W raised past 8) gets them before its tasks run, and the new slot commits there."""
    out, marks = _topics(kafka_bootstrap, unique_name)  # 4 partitions
    # enough already: nothing is created (a just-created topic's metadata may list fewer: a lower bound)
    assert 3 <= tx.ensure_commit_partitions(kafka_bootstrap, marks, 3, {}) <= 4
    assert tx.ensure_commit_partitions(kafka_bootstrap, marks, 10, {}) == 10
    t = _target(kafka_bootstrap, unique_name, marks)
    assert tx.commit_outputs(t, 1, 9, [(out, b"k", b"1", [])]) is True
    assert _fresh_attempts_marker(t, 9) == Marker("store-A", 1, 9)


def test_a_record_with_neither_key_nor_value_is_written_as_such(kafka_bootstrap, unique_name):
    """The dead letter of a (null, null) record, or of one too large to carry its payload, has no
    key and no value; kafka-python's send refuses that, Kafka does not: it lands null and null,
    with its headers, beside an ordinary record."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    recs = [(out, None, None, [("ballast-reason", b"null-key")]), (out, b"k", None, []), (out, None, b"v", [])]
    assert tx.commit_outputs(t, 1, 0, recs) is True
    got = list(scan_topic(kafka_bootstrap, out, 30.0, isolation_level="read_committed", consumer_timeout_ms=1000))
    assert sorted(((m.key, m.value) for m in got), key=repr) == sorted([(None, None), (b"k", None), (None, b"v")],
                                                                       key=repr)
    assert [dict(m.headers) for m in got if m.key is None and m.value is None] == [{"ballast-reason": b"null-key"}]


def test_committed_records_land_on_their_keys_partitions(kafka_bootstrap, unique_name):
    """What `commit_outputs` sends with the partition it computes is on that partition in the log
    (the output topic has 2): 40 keys, so a wrong rule would put some of them elsewhere."""
    out, marks = _topics(kafka_bootstrap, unique_name)
    recs = [(out, b"key-%d" % i, b"%d" % i, []) for i in range(40)]
    assert tx.commit_outputs(_target(kafka_bootstrap, unique_name, marks), 1, 0, recs) is True
    got = list(scan_topic(kafka_bootstrap, out, 30.0, isolation_level="read_committed", consumer_timeout_ms=1000))
    assert sorted(m.key for m in got) == sorted(r[1] for r in recs)
    assert {m.partition for m in got} == {0, 1}
    assert all(m.partition == tx.key_partition(m.key, 2) for m in got)


def test_a_commit_the_coordinator_never_answers_times_out_instead_of_waiting_forever() -> None:
    """The bound that keeps a gone broker from holding a Python worker (and its Spark slot) for good:
    kafka-python's own commit waits without a limit; ours raises, and commit_outputs retries."""
    import time

    from kafka.errors import KafkaTimeoutError
    from kafka.producer.transaction_manager import TransactionalRequestResult

    from spark_jobs.txn_output import _commit

    class _Sender:
        def wakeup(self) -> None:
            pass

    class _Tm:
        def begin_commit(self) -> TransactionalRequestResult:
            return TransactionalRequestResult()  # never completed: no coordinator answers

    class _Producer:
        _transaction_manager, _sender = _Tm(), _Sender()

    t0 = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="not answered within"):
        _commit(_Producer(), 0.3)
    assert time.monotonic() - t0 < 5


def test_a_send_the_client_dropped_aborts_the_attempt_instead_of_committing_a_hole(
        kafka_bootstrap, unique_name, monkeypatch, caplog):
    """kafka-python fails the future of a batch it expired (or lost to an epoch bump around a broker
    restart) without aborting the transaction: its commit would then succeed with that record
    missing and the marker written, and no replay would ever write it (a CI run lost 69 outputs so
    during a broker outage). Here the first attempt's send of one record fails that way (the fault
    is the client's and cannot be caused on demand); the attempt must not commit: a new producer
    aborts it and the retry commits every record once."""
    from kafka import TopicPartition
    from kafka.errors import KafkaTimeoutError
    from kafka.producer.future import FutureProduceResult, FutureRecordMetadata

    out, marks = _topics(kafka_bootstrap, unique_name)
    t = _target(kafka_bootstrap, unique_name, marks)
    real_send = KafkaProducer.send
    dropped: list[bytes] = []

    def send(self, topic, value=None, key=None, **kw):  # type: ignore[no-untyped-def]
        if value == b"2" and not dropped:
            dropped.append(value)
            batch = FutureProduceResult(TopicPartition(topic, 0))  # what the sender fails for an expired batch
            record = FutureRecordMetadata(batch, 0, -1, None, 0, 0, 0)
            batch.failure(KafkaTimeoutError("Expiring 1 record(s): 120000 ms has passed"))
            return record
        return real_send(self, topic, value=value, key=key, **kw)

    monkeypatch.setattr(KafkaProducer, "send", send)
    caplog.set_level(logging.WARNING, logger="ballast.txn_output")
    recs = [(out, b"k%d" % i, b"%d" % i, [(ID_HEADER, b"3:0:%d" % i)]) for i in range(4)]
    assert tx.commit_outputs(t, 3, 0, recs) is True
    assert dropped == [b"2"], "the fault was not injected: the test would prove nothing"
    assert _read(kafka_bootstrap, out, "read_committed") == [(b"k%d" % i, b"%d" % i) for i in range(4)]
    assert _fresh_attempts_marker(t, 0) == Marker("store-A", 3, 0)
    assert any("KafkaTimeoutError" in r.getMessage() for r in caplog.records), "the retry was not logged"
