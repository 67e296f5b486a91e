"""Records of every shape through the real broker into a real key-count job (local Spark): each one
is counted or dead-lettered with its reason, exactly once, and the query never stops for one.

Issue 21: a record with a null key and a null value raised a TypeError in the fold, the query
terminated, nothing reached `<job>.dlq` and every restart replayed it. Now its dead letter carries
`ballast-reason: null-key` and `ballast-source: topic:partition:offset`, the metrics DB counts it
and the console shows the count. One job serves the module (a Spark query costs ~20 s to start
here); every test writes its records and waits until the job has read up to their end offsets.
"""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer
from sqlalchemy import func, select

from ballast import console
from ballast.topics import create_missing_topics
from migrations_db import models as m
from migrations_db.db import migrate, session_scope
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import parse_id, record_id, scan_topic
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
LIMIT = 20 << 20  # the input topic takes records of several MB (Kafka's default is 1 MB)
MB3 = 3 << 20
YEAR_9999_MS = 253402300799000


class ShapesJob:
    """The module's job and what was written to it so far (the oracle)."""

    def __init__(self, spark: Any, bootstrap: str, cfg: RunConfig, runner: Any) -> None:
        self.spark, self.bootstrap, self.cfg, self.runner = spark, bootstrap, cfg, runner
        self.topic = cfg.input_topic
        self.counts: Counter[bytes] = Counter()  # key the operator counts -> records
        self.dead: Counter[str] = Counter()  # "topic:partition:offset" -> 1 for each expected dead letter
        self.written = 0

    def alive(self) -> None:
        q = self.runner.query
        assert q.isActive, f"the query stopped: {q.exception()}"

    def write(self, records: list[dict[str, Any]]) -> None:
        """Produce; the oracle is what the input topic then holds after the previous end offsets.
        kafka-python refuses a record with neither key nor value, so those go through Spark's Kafka
        writer (the Java client)."""
        before = end_offsets(self.bootstrap, self.topic)
        p = KafkaProducer(bootstrap_servers=self.bootstrap, max_request_size=LIMIT, acks="all")
        try:
            futs = [p.send(self.topic, key=r["key"], value=r["value"], headers=r.get("headers") or [],
                           timestamp_ms=r.get("ts"), partition=r.get("partition", 0))
                    for r in records if r["key"] is not None or r["value"] is not None]
            p.flush()
            for f in futs:
                f.get(timeout=60)
        finally:
            p.close()
        empty = [(None, None, r.get("partition", 0)) for r in records if r["key"] is None and r["value"] is None]
        if empty:
            (self.spark.createDataFrame(empty, "key binary, value binary, partition int").write.format("kafka")
             .option("kafka.bootstrap.servers", self.bootstrap).option("topic", self.topic).save())
        got = read_since(self.bootstrap, self.topic, before)
        assert len(got) == len(records), f"wrote {len(records)} records, the topic got {len(got)}"
        for part, off, key, value in got:
            self.expect(key, value, part, off)

    def expect(self, key: bytes | None, value: bytes | None, partition: int, offset: int) -> None:
        self.written += 1
        eff = key if key is not None else value  # keycount's extractor: the key, else the value
        if eff is None:
            self.dead[f"{self.topic}:{partition}:{offset}"] += 1
        else:
            self.counts[eff] += 1

    def consumed(self) -> bool:
        ckpt = self.cfg.checkpoint_dir + "/spark"
        done = committed_epochs(ckpt)
        return bool(done) and sum((read_end_offsets(ckpt, done[-1]) or {}).get(self.topic, {}).values()) \
            >= self.written

    def settle(self) -> None:
        wait_until(self.consumed, 300, f"the job reading all {self.written} records", check=self.alive)

    def read(self, topic: str) -> list[Any]:
        """Every record of `topic`, replay copies (same ballast-id) dropped."""
        seen: dict[tuple[int, int, int], Any] = {}
        for msg in scan_topic(self.bootstrap, topic, 120, consumer_timeout_ms=1000,
                              max_partition_fetch_bytes=LIMIT, fetch_max_bytes=LIMIT * 2):
            seen.setdefault(parse_id(record_id(msg)), msg)  # type: ignore[arg-type]
        return [seen[i] for i in sorted(seen)]

    def check(self) -> None:
        """Every record counted or dead-lettered, exactly once; the DB and the console agree."""
        latest: dict[bytes, int] = {}
        for o in self.read(f"{self.cfg.job}.output"):
            latest[o.key] = max(latest.get(o.key, 0), int(o.value))
        assert latest == dict(self.counts), "a record was lost or counted twice"
        dlq = self.read(f"{self.cfg.job}.dlq")
        hdrs = [dict(d.headers) for d in dlq]
        assert Counter(h["ballast-source"].decode() for h in hdrs) == self.dead
        assert {h["ballast-reason"] for h in hdrs} <= {b"null-key"} and all(h["ballast-error"] for h in hdrs)
        assert all(d.key is None and d.value is None for d in dlq)
        want = sum(self.dead.values())
        with session_scope(self.cfg.db_url) as s:
            in_db = s.scalar(select(func.sum(m.EpochMetrics.dead_letters)).where(m.EpochMetrics.job == self.cfg.job))
        assert int(in_db or 0) == want
        row = next(j for j in console.jobs(self.cfg.db_url) if j["job"] == self.cfg.job)
        assert row["dead_letters"] == want


@pytest.fixture(scope="module")
def shapes_job(spark, kafka_bootstrap, tmp_path_factory):  # type: ignore[no-untyped-def]
    import uuid

    base = tmp_path_factory.mktemp("shapes")
    job = f"t-shapes-{uuid.uuid4().hex[:6]}"
    topic = f"{job}.in"
    # several MB per record, and Kafka timestamps up to year 9999 (the broker's default refuses
    # anything more than an hour ahead: such a record never exists); no time-based retention, which
    # would delete a segment of records stamped 1970 before the job read it
    create_missing_topics(kafka_bootstrap, {topic: 2}, configs={topic: {
        "max.message.bytes": str(LIMIT), "message.timestamp.after.max.ms": str(2**63 - 1), "retention.ms": "-1"}})
    db_url = f"sqlite:///{base / 'metrics.db'}"
    migrate(db_url)
    cfg = RunConfig(job=job, operator="keycount", input_topic=topic, checkpoint_dir=str(base / "ckpt"),
                    bootstrap=kafka_bootstrap, db_url=db_url, bins=4, workers=2, trigger_ms=200)
    runner = start_job(spark, cfg)
    try:
        yield ShapesJob(spark, kafka_bootstrap, cfg, runner)
    finally:
        runner.stop()


def test_null_key_and_null_value_is_a_dead_letter_not_a_stopped_query(shapes_job):
    """The reported crash: before the fix the query terminated with a TypeError in fold_rows."""
    j = shapes_job
    j.write([{"key": b"a", "value": b"1"}, {"key": None, "value": None}, {"key": b"a", "value": None},
             {"key": None, "value": b"from-value"}, {"key": b"b", "value": b"2", "partition": 1}])
    j.settle()
    j.check()
    assert j.counts == Counter({b"a": 2, b"from-value": 1, b"b": 1})


def test_null_key_written_by_kafkas_console_producer(shapes_job):
    """Kafka's own client: `NULL` is its null marker, so these lines are (null, null), (null,
    'hello') and a tombstone of 'k1'."""
    j = shapes_job
    java = __import__("shutil").which("java")
    assert java, "the broker's JDK is needed for Kafka's console producer"
    cp = str(REPO / ".cache" / "jars" / "kafka-broker" / "*")
    before = end_offsets(j.bootstrap, j.topic)
    proc = subprocess.run(
        [java, "-cp", cp, "org.apache.kafka.tools.ConsoleProducer", "--bootstrap-server", j.bootstrap,
         "--topic", j.topic, "--property", "parse.key=true", "--property", "null.marker=NULL",
         "--producer-property", "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"],
        input=b"NULL\tNULL\nNULL\thello\nk1\tNULL\n", capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    got = read_since(j.bootstrap, j.topic, before)
    assert Counter((k, v) for _, _, k, v in got) == Counter([(None, None), (None, b"hello"), (b"k1", None)])
    for p, o, k, v in got:
        j.expect(k, v, p, o)
    j.settle()
    j.check()


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
        return {tp.partition: int(o) for tp, o in c.end_offsets(tps).items()}
    finally:
        c.close()


def read_since(bootstrap: str, topic: str, since: dict[int, int]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """The records of `topic` after the offsets `since`, as (partition, offset, key, value)."""
    return [(msg.partition, msg.offset, msg.key, msg.value)
            for msg in scan_topic(bootstrap, topic, 60, max_partition_fetch_bytes=LIMIT, fetch_max_bytes=LIMIT * 2)
            if msg.offset >= since.get(msg.partition, 0)]


KEYS = st.one_of(st.none(), st.just(b""), st.binary(max_size=24), st.text(max_size=12).map(str.encode),
                 st.sampled_from([b"\xff\xfe\xfd", b"\xc3\x28", b"k", b"\x00"]))
VALUES = st.one_of(st.none(), st.just(b""), st.binary(max_size=64), st.sampled_from([b"\xff" * 3, b"{oops"]))
HEADERS = st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=4096)), max_size=3)
TIMESTAMPS = st.one_of(st.none(), st.just(0), st.just(-5), st.just(YEAR_9999_MS), st.integers(-(10**15), YEAR_9999_MS))
RECORD = st.fixed_dictionaries({"key": KEYS, "value": VALUES, "headers": HEADERS, "ts": TIMESTAMPS,
                                "partition": st.integers(0, 1)})


@settings(max_examples=4, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(batch=st.lists(RECORD, min_size=1, max_size=25),
       big=st.sampled_from(["key", "value", "headers", "none"]))
def test_every_record_is_counted_or_dead_lettered_exactly_once(shapes_job, batch, big):
    """Random shapes (null/empty/non-UTF-8 key and value, headers, Kafka timestamps from 30 000
    years before 1970 to year 9999), one record of several MB, and always one (null, null): the
    job's output counts and its dead letters account for every record exactly once, and the query
    keeps running."""
    j = shapes_job
    heavy: dict[str, Any] = {"key": b"K" * MB3, "value": b"v", "partition": 1}
    if big == "value":
        heavy = {"key": None, "value": b"V" * MB3}  # the key count's key is the value: a 3 MB output
    elif big == "headers":
        heavy = {"key": b"h", "value": None, "headers": [("big", b"H" * MB3)] + [(f"h{i}", b"x") for i in range(200)]}
    extra = [heavy] if big != "none" else []
    j.write([*batch, {"key": None, "value": None}, *extra])
    j.settle()
    j.check()



def test_kafka_timestamps_the_broker_takes_and_refuses(kafka_bootstrap, make_topics, unique_name):
    """What docs/dataplane.md says of Kafka timestamps: a negative one is stored as is (Kafka's Java
    producer refuses it, kafka-python does not), one more than an hour ahead is refused under
    Kafka 4's default and never becomes a record a job could read."""
    from kafka.errors import InvalidTimestampError

    topic = f"{unique_name}.ts"
    make_topics({topic: 1})
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, retries=0)
    try:
        assert p.send(topic, key=b"k", value=b"v", timestamp_ms=-5).get(timeout=30).timestamp == -5
    finally:
        p.close()
    p = KafkaProducer(bootstrap_servers=kafka_bootstrap, retries=0)
    try:
        with pytest.raises(InvalidTimestampError):
            p.send(topic, key=b"k", value=b"v", timestamp_ms=YEAR_9999_MS).get(timeout=30)
    finally:
        p.close()
    assert end_offsets(kafka_bootstrap, topic) == {0: 1}


def test_a_processor_job_dead_letters_what_it_cannot_read(spark, kafka_bootstrap, make_topics, unique_name,
                                                          tmp_path, db_url, monkeypatch):
    """The event-time example processor (docs/operators.md) on records it cannot take: a value that
    is not JSON, not UTF-8, a tombstone, a timestamp of year 10000 (Spark parses it, Python cannot
    hold it) and a row behind the watermark: each a dead letter with its reason; the job goes on."""
    from tests.helpers.window_helpers import EXAMPLES

    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 1})
    monkeypatch.syspath_prepend(str(EXAMPLES))
    spark.sparkContext.addPyFile(str(EXAMPLES / "window_counts.py"))
    cfg = RunConfig(job=job, operator="window_counts:WindowCounts", input_topic=topic,
                    checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap, db_url=db_url, bins=4,
                    workers=2, trigger_ms=200)
    runner = start_job(spark, cfg)
    j = ShapesJob(spark, kafka_bootstrap, cfg, runner)
    row = lambda user, ts: b'{"user":"%s","ts":%d,"amount":1}' % (user.encode(), ts)  # noqa: E731 - ts in seconds
    try:
        j.write([{"key": b"k", "value": row("a", 100)}, {"key": b"k", "value": b"{oops"},
                 {"key": b"k", "value": None}, {"key": b"k", "value": b"\xff\xfe"},
                 {"key": b"k", "value": row("c", 253402300800)}, {"key": b"k", "value": row("b", 101)}])
        j.settle()
        j.write([{"key": b"k", "value": row("a", 1)}])  # the watermark is now 101 s - 5 s lateness: late
        j.settle()
        dlq = j.read(f"{job}.dlq")
        got = sorted((int(dict(d.headers)["ballast-source"].decode().rsplit(":", 1)[1]),
                      dict(d.headers)["ballast-reason"].decode()) for d in dlq)
        assert got == [(1, "decode-error"), (2, "null-value"), (3, "decode-error"), (4, "time-out-of-range"),
                       (6, "late")]
        assert [d.value for d in sorted(dlq, key=lambda d: dict(d.headers)["ballast-source"])][:3] == [
            b"{oops", None, b"\xff\xfe"], "the raw value of a record that did not parse"
        with session_scope(db_url) as s:
            assert s.scalar(select(func.sum(m.EpochMetrics.dead_letters)).where(m.EpochMetrics.job == job)) == 5
    finally:
        runner.stop()


def test_a_stateless_job_dead_letters_what_it_cannot_read(spark, kafka_bootstrap, make_topics, unique_name,
                                                          tmp_path, db_url):
    """NEXMark Q2, a stateless query (its epoch is one Spark job; Ballast's Kafka writer in the JVM
    sends a row with a reason to the dead-letter topic its write names): a bid whose price is a word
    and a tombstone reach `<job>.dlq` with their reason and source, the bid it keeps reaches
    `<job>.output`, and nothing else reaches either."""
    import json

    from spark_jobs.nexmark import topics as input_topics

    job = unique_name
    person, auction, bid = input_topics(job).split(",")
    make_topics({person: 1, auction: 1, bid: 1})
    cfg = RunConfig(job=job, operator="spark_jobs.nexmark.stateless:Q2", input_topic=input_topics(job),
                    checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap, db_url=db_url, bins=4,
                    workers=2, trigger_ms=200)
    runner = start_job(spark, cfg)
    j = ShapesJob(spark, kafka_bootstrap, cfg, runner)
    j.topic = bid  # the only topic Q2 reads
    doc = lambda a, price: json.dumps({"auction": a, "price": price, "bidder": 1, "date_time": 1}).encode()  # noqa: E731
    try:
        j.write([{"key": None, "value": doc(123, 7)}, {"key": None, "value": doc(1, 8)},
                 {"key": None, "value": doc(246, "seven")}, {"key": b"k", "value": None}])
        j.settle()
        assert [json.loads(o.value) for o in j.read(f"{job}.output")] == [{"auction": 123, "price": 7}]
        dlq = j.read(f"{job}.dlq")
        got = [(dict(d.headers)["ballast-source"].decode(), dict(d.headers)["ballast-reason"].decode(), d.value)
               for d in dlq]
        assert got == [(f"{bid}:0:2", "decode-error", doc(246, "seven")), (f"{bid}:0:3", "null-value", None)]
    finally:
        runner.stop()
