"""The real broker: topics with explicit partition counts, acks=all produce, consume back."""

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from ballast.topics import TopicsNotReady, create_missing_topics, wait_writable

pytestmark = pytest.mark.foundation


def test_produce_consume_roundtrip_on_four_partitions(kafka_bootstrap, make_topics, unique_name):
    topic = f"{unique_name}.rt"
    make_topics({topic: 4})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    sent = {}
    for i in range(200):
        md = producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 4).get(timeout=30)
        sent[(md.partition, md.offset)] = (f"k{i}", f"v{i}")
    producer.close()
    assert {p for p, _ in sent} == {0, 1, 2, 3}

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=10000)
    consumer.assign([TopicPartition(topic, p) for p in range(4)])
    got = {}
    for rec in consumer:
        got[(rec.partition, rec.offset)] = (rec.key.decode(), rec.value.decode())
        if len(got) == len(sent):
            break
    consumer.close()
    assert got == sent


def test_existing_topic_with_other_partition_count_is_an_error(kafka_bootstrap, make_topics, unique_name):
    stack = __import__("sys").modules["ballast_stack"]  # loaded by tests/conftest.py

    topic = f"{unique_name}.pc"
    make_topics({topic: 2})
    with pytest.raises(stack.StackError, match="has 2 partitions, expected 3"):
        make_topics({topic: 3})


def test_created_topics_take_writes_at_once_and_a_missing_one_is_a_clear_error(kafka_bootstrap, unique_name):
    """ballast.topics.create_missing_topics returns once every new partition answers from its leader
    (wait_writable): a write right after it meets no NOT_LEADER_OR_FOLLOWER."""
    topic = f"{unique_name}.fresh"
    create_missing_topics(kafka_bootstrap, {topic: 4})
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", retries=0)
    for p in range(4):
        producer.send(topic, value=b"x", partition=p).get(timeout=10)
    producer.close()
    t0 = time.monotonic()
    with pytest.raises(TopicsNotReady, match=rf"{unique_name}\.never.*within 2 s"):
        wait_writable(kafka_bootstrap, {f"{unique_name}.never": 2}, timeout_s=2.0)
    assert time.monotonic() - t0 < 10, "the wait keeps to its timeout"
