"""Outputs: the records a task writes (`output_records`; as Spark Kafka-writer rows: `kafka_rows`),
and reading `<job>.output` exactly once.

Every output record carries the header `ballast-id = "<epoch>:<worker>:<seq>"`. How a reader sees
each output once depends on how it reads and how the job writes (docs/dataplane.md, "Outputs: the
consumer rule"):

- A keyed job writes with transactional output (the default, spark_jobs.txn_output): each task
  commits its records in one Kafka transaction with its slot's commit marker, and a replayed
  epoch whose marker is committed writes nothing. A `read_committed` consumer needs no rule.
- A `read_uncommitted` consumer (it also sees the copies of aborted transactions), any reader of a
  stateless query or of a job run with `--output-mode at-least-once` (Spark's Kafka sink: a
  replayed epoch re-emits its outbox under the same ids, same values) drops a record whose id it
  has already seen. Replays only ever concern the last epoch or two (the outbox keeps 2 epochs),
  so such a consumer may bound its seen-set to ids of epochs >= (highest epoch seen - 2) in the
  record's partition (tests/helpers/dp_helpers.read_output_bounded).
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spark_jobs.objects import DEAD_LETTER
from spark_jobs.records import MAX_RECORD_BYTES, OPERATOR_ERROR, TOO_LARGE, dead_headers, too_large

OUTPUT_SCHEMA = "topic string, key binary, value binary, headers array<struct<key:string,value:binary>>"

ID_HEADER = "ballast-id"


@functools.cache
def output_type() -> Any:
    """OUTPUT_SCHEMA as a StructType built in Python: a DDL string handed to `mapInArrow` is parsed by
    the JVM (Py4J round trips) in every epoch's plan."""
    from pyspark.sql.types import ArrayType, BinaryType, StringType, StructField, StructType

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType([StructField("topic", StringType()), StructField("key", BinaryType()),
                       StructField("value", BinaryType()), StructField("headers", ArrayType(header))])


def output_topic(job: str) -> str:
    return f"{job}.output"


def dlq_topic(job: str) -> str:
    """Records the operator could not process (its fold raised), with the reason in headers."""
    return f"{job}.dlq"


def output_records(epoch: int, worker: int, outputs: list[tuple[int, bytes, bytes, str | None]], output_topic: str,
                   dlq_topic: str) -> list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    """One task's outputs as Kafka records (topic, key, value, headers): outputs to `output_topic`,
    dead letters to `dlq_topic` with their reason (spark_jobs.records), source
    (topic:partition:offset) and error; every record under its id `epoch:worker:seq`. The same
    records whichever writer sends them (Spark's Kafka sink or a transactional producer)."""
    out: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
    for seq, (kind, k_in, v_in, note) in enumerate(outputs):
        key: bytes | None = k_in
        value: bytes | None = v_in
        hdr: list[tuple[str, bytes]] = [(ID_HEADER, b"%d:%d:%d" % (epoch, worker, seq))]
        info = json.loads(note or "{}") if kind == DEAD_LETTER else {}
        if kind == DEAD_LETTER:
            hdr += [(h["key"], h["value"]) for h in
                    dead_headers(epoch, info.get("reason", OPERATOR_ERROR), str(info.get("error", "")), info)]
        size = too_large(key, value, [{"key": k, "value": v} for k, v in hdr])
        if size:  # the writer would fail the epoch (and every replay of it): a dead letter without payload
            what = "dead letter" if kind == DEAD_LETTER else f"output to {output_topic}"
            err = (f"{what} of {size} bytes is over the job's {MAX_RECORD_BYTES}-byte record limit; "
                   f"its key and value were dropped (the source record is still in its topic)")
            hdr = hdr[:1] + [(h["key"], h["value"]) for h in dead_headers(epoch, TOO_LARGE, err, info)]
            kind, key, value = DEAD_LETTER, None, None
        out.append((dlq_topic if kind == DEAD_LETTER else output_topic, key, value, hdr))
    return out


def kafka_arrow_schema() -> Any:
    """OUTPUT_SCHEMA as Arrow: what a routed task (`mapInArrow`) yields for Spark's Kafka writer."""
    import pyarrow as pa

    headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()), ("headers", headers)])


def kafka_rows(epoch: int, worker: int, outputs: list[tuple[int, bytes, bytes, str | None]], output_topic: str,
               dlq_topic: str) -> Any:
    """One task's outputs (`output_records`) as Spark's Kafka-writer rows (OUTPUT_SCHEMA)."""
    import pyarrow as pa

    recs = output_records(epoch, worker, outputs, output_topic, dlq_topic)
    schema = kafka_arrow_schema()
    return pa.RecordBatch.from_arrays(
        [pa.array([r[0] for r in recs], pa.string()), pa.array([r[1] for r in recs], pa.binary()),
         pa.array([r[2] for r in recs], pa.binary()),
         pa.array([[{"key": k, "value": v} for k, v in r[3]] for r in recs], schema.field("headers").type)],
        schema=schema)


@dataclass(frozen=True, order=True)
class OutputRecord:
    epoch: int
    worker: int
    seq: int
    key: bytes
    value: bytes


def parse_id(raw: bytes) -> tuple[int, int, int]:
    e, w, s = raw.decode().split(":")
    return int(e), int(w), int(s)


def scan_topic(bootstrap: str, topic: str, timeout_s: float, from_ms: int | None = None,
               **consumer_opts: Any) -> Iterator[Any]:
    """Every record of `topic` from the beginning (or from Kafka time `from_ms`) up to the end
    offsets at call time, partition by partition as polled; TimeoutError if the end is not reached."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None, **consumer_opts)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(parts)
        end = consumer.end_offsets(parts)
        if from_ms is None:
            consumer.seek_to_beginning(*parts)
        else:
            start = consumer.offsets_for_times({tp: from_ms for tp in parts})
            for tp in parts:
                off = start.get(tp)
                consumer.seek(tp, off.offset if off is not None else end[tp])
        deadline = time.time() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in parts):
            if time.time() > deadline:
                raise TimeoutError(f"reading {topic} did not reach its end offsets in {timeout_s}s")
            for msgs in consumer.poll(timeout_ms=500).values():
                yield from msgs
    finally:
        consumer.close()


def record_id(msg: Any) -> bytes | None:
    """The raw `ballast-id` header of an output record (None if it has none)."""
    for k, v in msg.headers or []:
        if k == ID_HEADER:
            return v
    return None


def read_output(bootstrap: str, topic: str, timeout_s: float = 60.0) -> tuple[list[OutputRecord], int]:
    """All records now in `topic` (up to the end offsets at call time) and how many were duplicates."""
    seen: dict[tuple[int, int, int], OutputRecord] = {}
    dups = 0
    for msg in scan_topic(bootstrap, topic, timeout_s, consumer_timeout_ms=1000, max_poll_records=5000):
        rid = parse_id(record_id(msg))  # type: ignore[arg-type]
        rec = OutputRecord(*rid, msg.key, msg.value)
        if rid in seen:
            dups += 1
            if seen[rid] != rec:
                raise AssertionError(f"output id {rid} seen with two different values")
            continue
        seen[rid] = rec
    return sorted(seen.values()), dups


def read_deduplicated_output(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[OutputRecord]:
    """Outputs of `topic` with replay duplicates dropped, ordered by (epoch, worker, seq)."""
    return read_output(bootstrap, topic, timeout_s)[0]
