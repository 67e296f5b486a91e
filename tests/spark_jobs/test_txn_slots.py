"""A slot's Kafka clients (spark_jobs.txn_slots), against the real broker: a producer prepared at a
task's start has its topics' metadata before any send, fences nobody, and is the one the slot's next
commit initialises; a process that holds the slot prepares nothing. The protocol around them
(fencing, markers, replays) is tests/spark_jobs/test_txn_output.py's."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaProducer

from ballast.topics import create_missing_topics
from spark_jobs import txn_output as tx
from spark_jobs import txn_slots as txs
from spark_jobs.output import ID_HEADER, scan_topic
from spark_jobs.run_config import COMMITS_TOPIC_CONFIG
from spark_jobs.txn_output import commits_topic
from spark_jobs.txn_slots import Marker, TxnTarget, transactional_id
from tests.helpers.wait import wait_until


@pytest.fixture(autouse=True)
def _fresh_clients():
    """No client cached in this process before or after a test (an open client logs connection
    errors once the session's broker stops)."""
    txs.close_clients()
    yield
    txs.close_clients()
    assert not txs._slots and not txs._consumers and not txs._prepared and not txs._preparing


def test_a_prepared_producer_fences_nobody_and_is_the_next_commits(kafka_bootstrap, unique_name):
    """Slot 1 is held by another process's producer (initialised). This process prepares the slot:
    a producer with the output and marker topics' metadata fetched without a send, not initialised,
    so the holder still commits epoch 1. This process's commit of epoch 2 then initialises the
    prepared producer (no second one is made) and writes once; preparing again while it holds the
    slot makes nothing."""
    out, marks = f"{unique_name}.output", commits_topic(f"{unique_name}.output")
    create_missing_topics(kafka_bootstrap, {out: 2, marks: 4}, configs={marks: COMMITS_TOPIC_CONFIG})
    t = TxnTarget(bootstrap=kafka_bootstrap, job=unique_name, operator="keycount", store_id="store-A",
                  commits_topic=marks, outage_s=20.0)
    tid = transactional_id(unique_name, "keycount", 1)
    holder = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid, acks="all")
    holder.init_transactions()

    made = txs.stats["prepared"]
    txs.prepare(t, 1, [out])  # made in a thread of its own
    wait_until(lambda: tid in txs._prepared, 30, "the prepared producer")
    assert txs.stats["prepared"] == made + 1
    prepared = txs._prepared[tid][1]
    # the metadata kafka-python would fetch at the first send, one topic per ~100 ms request
    wait_until(lambda: all(prepared._metadata.partitions_for_topic(x) for x in (out, marks)), 10,
               "the prepared producer's topic metadata")

    holder.begin_transaction()  # not fenced by the prepare
    holder.send(out, key=b"k", value=b"1", headers=[(ID_HEADER, b"1:1:0")])
    holder.send(marks, key=b"w1", value=Marker("store-A", 1, 1).value(), partition=1)
    holder.commit_transaction()
    holder.close()

    inits = txs.stats["inits"]
    assert tx.commit_outputs(t, 2, 1, [(out, b"k", b"2", [(ID_HEADER, b"2:1:0")])]) is True
    assert txs.stats["inits"] == inits + 1 and txs._slots[tid].producer is prepared and tid not in txs._prepared
    assert txs._slots[tid].last == Marker("store-A", 2, 1)  # it read the holder's epoch 1, then wrote 2

    txs.prepare(t, 1, [out])  # the process holds the slot: nothing to prepare
    assert txs.stats["prepared"] == made + 1 and tid not in txs._prepared
    committed = sorted((m.key, m.value) for m in scan_topic(kafka_bootstrap, out, 30.0,
                                                             isolation_level="read_committed",
                                                             consumer_timeout_ms=1000))
    assert committed == [(b"k", b"1"), (b"k", b"2")]


@pytest.mark.slow  # ~10 s: the producer's bootstrap timeout
def test_a_prepare_that_cannot_reach_the_broker_costs_the_task_nothing(unique_name):
    """Preparing is a head start, made in a thread: a broker it cannot reach holds no task (one with
    nothing to commit needs no broker at all), and is logged; the commit then makes its own producer
    and meets the outage with its retries."""
    from tests.helpers.procs import free_port

    t = TxnTarget(bootstrap=f"127.0.0.1:{free_port()}", job=unique_name, operator="keycount", store_id="s",
                  commits_topic=f"{unique_name}.output.commits", outage_s=1.0)
    made = txs.stats["prepared"]
    t0 = time.monotonic()
    txs.prepare(t, 0, [f"{unique_name}.output"])
    assert time.monotonic() - t0 < 2.0, "prepare held the task while the broker was away"
    wait_until(lambda: not txs._preparing, 60, "the prepare thread to give up")
    assert txs.stats["prepared"] == made and not txs._prepared
