"""spark_jobs.output: a task's outputs become Kafka-writer rows under the ids `epoch:worker:seq`,
dead letters with their reason and source in headers, and a record over the limit a payload-free
`too-large` dead letter; a reader of `<job>.output` drops replayed ids and sees each output once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_jobs.objects import DEAD_LETTER, OUTPUT
from spark_jobs.output import (
    ID_HEADER,
    OutputRecord,
    dlq_topic,
    kafka_rows,
    output_topic,
    parse_id,
    read_deduplicated_output,
    read_output,
    record_id,
)
from spark_jobs.records import NULL_KEY, OPERATOR_ERROR, dead_note
from spark_jobs.worker import ApplyConfig

pytestmark = pytest.mark.dataplane
K = 2


def _headers(row: dict) -> dict[str, bytes]:
    return {h["key"]: h["value"] for h in row["headers"]}


def test_an_output_over_the_record_limit_becomes_a_too_large_dead_letter():
    """The Kafka writer would fail the epoch (at every replay) on a record over the job's limit."""
    from spark_jobs.records import MAX_RECORD_BYTES, TOO_LARGE, dead_note

    cfg = ApplyConfig(epoch=3, job="j", operator="keycount", bins_bits=K, workers=1, assignment=(0,) * (1 << K),
                      state_uri="", store_id="s", history=SimpleNamespace(), output_topic="j.output",  # type: ignore[arg-type]
                      dlq_topic="j.dlq", input_topic="in")
    huge = b"x" * MAX_RECORD_BYTES
    outs = [(OUTPUT, b"k", b"1"), (OUTPUT, huge, b"2"), (DEAD_LETTER, None, huge, dead_note(NULL_KEY, "in", 1, 7))]
    rows = kafka_rows(cfg.epoch, 0, [(*o, None) if len(o) == 3 else o for o in outs], cfg.output_topic,
                      cfg.dlq_topic).to_pylist()  # type: ignore[arg-type]
    assert [(r["topic"], r["key"], r["value"]) for r in rows] == [("j.output", b"k", b"1"), ("j.dlq", None, None),
                                                                  ("j.dlq", None, None)]
    h1, h2 = ({h["key"]: h["value"] for h in r["headers"]} for r in rows[1:])
    assert h1["ballast-reason"] == TOO_LARGE.encode() and b"output to j.output" in h1["ballast-error"]
    assert h2["ballast-reason"] == TOO_LARGE.encode() and h2["ballast-source"] == b"in:1:7"
    assert [h1["ballast-id"], h2["ballast-id"]] == [b"3:0:1", b"3:0:2"], "ids stay in place: replays match"


def test_outputs_and_dead_letters_go_to_their_topics_under_their_ids():
    outs = [(OUTPUT, b"a", b"1", None), (DEAD_LETTER, None, b"raw", dead_note(NULL_KEY, "in", 3, 17, "no key")),
            (OUTPUT, b"b", b"2", None), (DEAD_LETTER, b"k", b"v", None)]
    rows = kafka_rows(12, 4, outs, "j.output", "j.dlq").to_pylist()
    assert [(r["topic"], r["key"], r["value"]) for r in rows] == [
        ("j.output", b"a", b"1"), ("j.dlq", None, b"raw"), ("j.output", b"b", b"2"), ("j.dlq", b"k", b"v")]
    assert [_headers(r)[ID_HEADER] for r in rows] == [b"12:4:0", b"12:4:1", b"12:4:2", b"12:4:3"]
    assert [h["key"] for h in rows[0]["headers"]] == [ID_HEADER], "an output carries its id only"
    dead = _headers(rows[1])
    assert (dead["ballast-reason"], dead["ballast-error"], dead["ballast-epoch"], dead["ballast-source"]) == (
        NULL_KEY.encode(), b"no key", b"12", b"in:3:17")
    assert _headers(rows[3])["ballast-reason"] == OPERATOR_ERROR.encode(), "a dead letter without a note"
    assert kafka_rows(1, 0, [], "o", "d").num_rows == 0


def test_ids_parse_back_and_a_record_without_one_has_none():
    assert parse_id(b"12:4:0") == (12, 4, 0)
    with pytest.raises(ValueError):
        parse_id(b"12:4")
    assert record_id(SimpleNamespace(headers=[("other", b"x"), (ID_HEADER, b"1:2:3")])) == b"1:2:3"
    assert record_id(SimpleNamespace(headers=None)) is None and record_id(SimpleNamespace(headers=[])) is None
    assert (output_topic("clicks"), dlq_topic("clicks")) == ("clicks.output", "clicks.dlq")


def _msg(rid: str, key: bytes, value: bytes) -> SimpleNamespace:
    return SimpleNamespace(headers=[(ID_HEADER, rid.encode())], key=key, value=value)


def test_a_reader_drops_replayed_ids_and_refuses_two_values_under_one_id(monkeypatch):
    import spark_jobs.output as out

    msgs = [_msg("2:0:0", b"a", b"3"), _msg("1:1:0", b"b", b"1"), _msg("1:0:0", b"a", b"2"),
            _msg("2:0:0", b"a", b"3"), _msg("1:0:0", b"a", b"2")]  # epochs 1 and 2 replayed
    monkeypatch.setattr(out, "scan_topic", lambda *a, **kw: iter(msgs))
    records, dups = read_output("b", "j.output")
    assert dups == 2 and records == [OutputRecord(1, 0, 0, b"a", b"2"), OutputRecord(1, 1, 0, b"b", b"1"),
                                     OutputRecord(2, 0, 0, b"a", b"3")]
    assert read_deduplicated_output("b", "j.output") == records
    msgs.append(_msg("1:1:0", b"b", b"9"))
    with pytest.raises(AssertionError, match=r"output id \(1, 1, 0\) seen with two different values"):
        read_output("b", "j.output")


@pytest.mark.dataplane
def test_the_output_type_built_in_python_is_the_output_schema(spark) -> None:
    """`mapInArrow` gets the StructType (no JVM parse per epoch); it must stay the DDL's type."""
    from spark_jobs.output import OUTPUT_SCHEMA, output_type

    assert spark.createDataFrame([], OUTPUT_SCHEMA).schema == output_type()
