"""Stateless queries (spark_jobs.stateless) on a real local Spark, written by Ballast's Kafka writer
(spark_jobs.id_sink) to the test broker and read back: the records a batch of input records
becomes, all in the JVM — outputs with their ids, dead letters with a processor's headers, the
record limit, a generator refused, and the same records on a replay."""

from __future__ import annotations

import json

import pytest

from spark_jobs import id_sink
from spark_jobs.output import scan_topic
from spark_jobs.records import DECODE_ERROR, MAX_RECORD_BYTES, NULL_VALUE, REASON_HEADER, TOO_LARGE
from spark_jobs.stateless import QueryRefused, StatelessOperator, StatelessQuery

pytestmark = [pytest.mark.dataplane, pytest.mark.services]

SCHEMA = "auction long, price long, note string"
Q = StatelessQuery(input_schema=SCHEMA, where="price > 10", output=("auction", "price * 2 AS doubled", "note"),
                   key=("auction",))


def _input(spark, values: list[bytes | None], partition: int = 1):  # type: ignore[no-untyped-def]
    """Input rows as spark_jobs.inputs hands them on: one topic, offsets 100, 101, ..."""
    rows = [(b"k", v, "in", partition, 100 + i) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")


@pytest.fixture
def written(kafka_bootstrap, make_topics, unique_name):  # type: ignore[no-untyped-def]
    """write(rows, epoch): the records Ballast's writer wrote for `rows` (the query's rows) to fresh
    output and dead-letter topics, read back from the broker in id order."""
    n = [0]

    def write(rows, epoch: int) -> list[dict]:  # type: ignore[no-untyped-def]
        n[0] += 1
        out, dlq = f"{unique_name}-{n[0]}.o", f"{unique_name}-{n[0]}.d"
        make_topics({out: 2, dlq: 1})
        assert tuple(rows.columns) == (*id_sink.COLUMNS, "__dead")  # what the writer reads, and the count
        dead = rows.where("__dead = 1").count()
        id_sink.writer(rows.drop("__dead"), epoch, kafka_bootstrap, {}, out, dlq).save()
        got = []
        for topic, name in ((out, "o"), (dlq, "d")):
            for m in scan_topic(kafka_bootstrap, topic, 60.0):
                hdr = {k: v.decode() if v is not None else None for k, v in m.headers}
                got.append({"topic": name, "key": m.key, "value": m.value, "headers": hdr, "dead": int(name == "d")})
        assert sum(g["dead"] for g in got) == dead  # `__dead` counts what went to the dead-letter topic
        return sorted(got, key=lambda g: [int(x) for x in g["headers"]["ballast-id"].split(":")])

    return write


def test_outputs_and_dead_letters_come_from_the_jvm_with_ids(spark, written):
    op = StatelessOperator(Q)
    values = [b'{"auction": 7, "price": 50, "note": null}', b'{"auction": 8, "price": 5}', b"not json", None,
              b'{"auction": 9, "price": 11, "note": "x"}']
    got = written(op.rows(_input(spark, values), ["in"]), 42)
    by_offset = {int(g["headers"]["ballast-id"].split(":")[2]): g for g in got}
    assert sorted(by_offset) == [100, 102, 103, 104]  # 101 filtered out by `where`
    assert all(g["headers"]["ballast-id"].startswith("42:1:") for g in got)
    ok = by_offset[100]
    assert ok["topic"] == "o" and ok["dead"] == 0 and list(ok["headers"]) == ["ballast-id"]
    assert json.loads(ok["value"]) == {"auction": 7, "doubled": 100, "note": None}  # nulls kept, like a processor's
    assert json.loads(ok["key"]) == {"auction": 7}
    bad, tomb = by_offset[102], by_offset[103]
    assert (bad["topic"], bad["headers"][REASON_HEADER], bad["value"]) == ("d", DECODE_ERROR, b"not json")
    assert (tomb["topic"], tomb["headers"][REASON_HEADER], tomb["value"]) == ("d", NULL_VALUE, None)
    assert list(bad["headers"]) == ["ballast-id", REASON_HEADER, "ballast-error", "ballast-epoch", "ballast-source"]
    assert bad["headers"]["ballast-source"] == "in:1:102" and bad["headers"]["ballast-epoch"] == "42"
    assert bad["dead"] == 1 and bad["key"] is None
    assert "input_schema" in bad["headers"]["ballast-error"]


def test_a_replay_writes_the_same_records(spark, written):
    op = StatelessOperator(Q)
    values = [b'{"auction": %d, "price": %d}' % (i, 20 + i) for i in range(50)]
    first = written(op.rows(_input(spark, values), ["in"]), 3)
    again = written(StatelessOperator(Q).rows(_input(spark, values), ["in"]), 3)
    assert first == again and len(first) == 50


def test_several_input_topics_name_the_source_record(spark, written):
    """With n input topics the routed partition is `partition * n + source` (spark_jobs.inputs)."""
    op = StatelessOperator(StatelessQuery(input_schema=SCHEMA, output=("auction",)))
    got = written(op.rows(_input(spark, [b"{"], partition=2 * 2 + 1), ["a", "b"]), 1)
    assert got[0]["headers"]["ballast-source"] == "b:2:100"
    assert got[0]["headers"]["ballast-id"] == "1:5:100"


def test_an_output_over_the_record_limit_is_a_dead_letter_without_payload(spark, written):
    op = StatelessOperator(StatelessQuery(input_schema=SCHEMA, output=("note",)))
    big = json.dumps({"auction": 1, "price": 1, "note": "x" * MAX_RECORD_BYTES}).encode()
    got = written(op.rows(_input(spark, [big]), ["in"]), 1)
    assert got[0]["topic"] == "d" and got[0]["headers"][REASON_HEADER] == TOO_LARGE
    assert got[0]["value"] is None and "record limit" in got[0]["headers"]["ballast-error"]


def test_a_generator_is_refused_with_what_to_do(spark):
    op = StatelessOperator(StatelessQuery(input_schema=SCHEMA, columns=(("w", "explode(split(note, ' '))"),),
                                          output=("w",)))
    with pytest.raises(QueryRefused, match="Run it as a processor"):
        op.rows(_input(spark, [b'{"note": "a b"}']), ["in"])


def test_a_query_needs_an_output_column():
    with pytest.raises(ValueError, match="at least one output column"):
        StatelessQuery(output=())


def test_timestamps_reach_the_output_as_epoch_milliseconds(spark, written):
    """As in a processor's rows: a timestamp column of the input schema is written as epoch ms."""
    op = StatelessOperator(StatelessQuery(input_schema="auction long, at timestamp", output=("auction", "at")))
    at = b'{"auction": 1, "at": "1970-01-01T00:00:01.5Z"}'
    got = written(op.rows(_input(spark, [at]), ["in"]), 1)
    assert json.loads(got[0]["value"]) == {"auction": 1, "at": 1500}
