"""The driver reads an epoch's control records itself (spark_jobs.control_reader), from the offset
range Spark logged: against a real broker, exactly the records of the range, in (partition,
offset) order, the same on a second read (a replay), and a range retention deleted is an error."""

from __future__ import annotations

import pytest

from spark_jobs.control_reader import ControlRangeLost, read_control

pytestmark = pytest.mark.dataplane


def _consumer(bootstrap: str):  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)


def _write(bootstrap: str, topic: str, per_partition: int) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(per_partition):
        for part in (0, 1):
            p.send(topic, value=b"p%d-%d" % (part, i), partition=part)
    p.flush()
    p.close()


def test_reads_exactly_the_range_in_order_and_again_on_a_replay(kafka_bootstrap, make_topics, unique_name):
    topic = f"{unique_name}.control"
    make_topics({topic: 2})
    _write(kafka_bootstrap, topic, 10)
    c = _consumer(kafka_bootstrap)
    try:
        ranges = {0: (2, 5), 1: (7, 10)}
        got = read_control(c, topic, ranges)
        assert [(r.offset, r.value) for r in got] == (
            [(f"0:{i}", b"p0-%d" % i) for i in range(2, 5)] + [(f"1:{i}", b"p1-%d" % i) for i in range(7, 10)])
        assert read_control(c, topic, ranges) == got  # a replay of the epoch reads the same records
        assert read_control(c, topic, {0: (4, 4), 1: (3, 3)}) == []  # an empty range reads nothing
    finally:
        c.close()


def test_a_range_retention_deleted_is_an_error_that_says_what_to_do(kafka_bootstrap, make_topics, unique_name):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    topic = f"{unique_name}.control"
    make_topics({topic: 2})
    _write(kafka_bootstrap, topic, 6)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 3})  # what retention does: the first 3 are gone
    finally:
        admin.close()
    c = _consumer(kafka_bootstrap)
    try:
        with pytest.raises(ControlRangeLost, match=r"retention deleted them.*longer retention"):
            read_control(c, topic, {0: (1, 5)})
        assert [r.offset for r in read_control(c, topic, {0: (3, 5)})] == ["0:3", "0:4"]
    finally:
        c.close()
