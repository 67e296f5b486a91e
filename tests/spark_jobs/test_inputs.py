"""A chain's hand-off, deduplicated (spark_jobs.inputs): the upstream operator's outputs carry
`ballast-id` = epoch:worker:seq, and a replay re-emits them. Real Kafka, real Spark: batches cut
where a crash would cut them — a partial attempt, then the full replay — give every id once, a
replay of the downstream epoch filters exactly as its first run did, and rows without an id pass."""

from __future__ import annotations

import json

import pytest
from kafka import KafkaProducer

from ballast.topics import create_missing_topics
from spark_jobs.inputs import InputRows
from spark_jobs.storage import Location

pytestmark = pytest.mark.dataplane


def _send(bootstrap: str, topic: str, ids: list[str | None]) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in ids:
        headers = [("ballast-id", i.encode())] if i else []
        p.send(topic, key=b"k", value=(i or "plain").encode(), partition=0, headers=headers).get(timeout=30)
    p.close()


def test_replayed_upstream_outputs_are_taken_once(spark, kafka_bootstrap, unique_name, tmp_path):
    topic = f"{unique_name}.tag.out"
    create_missing_topics(kafka_bootstrap, {topic: 1})
    attempt1 = [f"7:0:{s}" for s in range(6)]  # upstream epoch 7, worker 0: a task that died after seq 5
    replay = [f"7:0:{s}" for s in range(10)] + [f"7:1:{s}" for s in range(3)] + [f"8:0:{s}" for s in range(4)]
    within = ["8:0:4", "8:0:4", None, "8:0:3"]  # a copy inside one batch, a plain record, an old id
    _send(kafka_bootstrap, topic, attempt1 + replay + within)
    cuts = [0, len(attempt1), len(attempt1) + len(replay), len(attempt1) + len(replay) + len(within)]
    inputs = InputRows([topic], (topic,), Location.of(str(tmp_path / "journal")))

    def batch(i: int) -> list[str]:
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
              .option("subscribe", topic).option("includeHeaders", "true")
              .option("startingOffsets", json.dumps({topic: {"0": cuts[i]}}))
              .option("endingOffsets", json.dumps({topic: {"0": cuts[i + 1]}})).load())
        return sorted(bytes(r["value"]).decode() for r in inputs.rows(df, i + 1).collect())

    first = batch(0)
    assert first == sorted(attempt1)
    second = batch(1)
    assert second == sorted([f"7:0:{s}" for s in range(6, 10)] + [f"7:1:{s}" for s in range(3)]
                            + [f"8:0:{s}" for s in range(4)])
    assert batch(1) == second, "a replay of the downstream epoch filters as its first run did"
    assert batch(2) == ["8:0:4", "plain"]
    assert inputs.mark_before(99) == {f"{topic}|0|0": [8, 4], f"{topic}|0|1": [7, 2]}


def test_an_observed_mark_equals_the_collected_one_and_needs_no_job_of_its_own(spark, kafka_bootstrap, unique_name,
                                                                               tmp_path):
    """`observe` (a transactional keyed operator): once the marks know a batch's (partition, upstream
    worker) groups, the mark is observed in the epoch's own job (here a `noop` write, as the
    epoch's) and written by `after_job`; a batch with a new group, and the first, are collected.
    The rows taken and the marks are those of the collecting path."""
    topic = f"{unique_name}.obs.out"
    create_missing_topics(kafka_bootstrap, {topic: 1})
    batches = [[f"7:0:{s}" for s in range(6)],  # the first batch: no groups known yet
               [f"7:0:{s}" for s in range(6, 10)] + [f"7:1:{s}" for s in range(3)],  # worker 1 is new
               [f"7:0:{s}" for s in range(4, 12)] + ["7:1:2", "7:1:3", None],  # known groups, copies and new ids
               ["8:0:0", "8:0:0", "7:1:3"]]
    _send(kafka_bootstrap, topic, [i for b in batches for i in b])
    cuts = [0]
    for b in batches:
        cuts.append(cuts[-1] + len(b))

    def df(i: int):
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
                .option("subscribe", topic).option("includeHeaders", "true")
                .option("startingOffsets", json.dumps({topic: {"0": cuts[i]}}))
                .option("endingOffsets", json.dumps({topic: {"0": cuts[i + 1]}})).load())

    seen = InputRows([topic], (topic,), Location.of(str(tmp_path / "observed")), observe=True)
    ref = InputRows([topic], (topic,), Location.of(str(tmp_path / "collected")))
    for i in range(len(batches)):
        before = seen.collects
        rows = seen.rows(df(i), i + 1)
        rows.write.format("noop").mode("overwrite").save()
        seen.after_job(i + 1)
        took_observed = sorted(bytes(r["value"]).decode() for r in seen.rows(df(i), i + 1).collect())
        seen.after_job(i + 1)  # the mark exists: the replay changes nothing
        took = sorted(bytes(r["value"]).decode() for r in ref.rows(df(i), i + 1).collect())
        assert took_observed == took, i
        assert seen.mark_before(i + 2) == ref.mark_before(i + 2), i
        assert seen.collects - before == (1 if i < 2 else 0), f"batch {i}: a collect of its own"
    assert ref.mark_before(99) == {f"{topic}|0|0": [8, 0], f"{topic}|0|1": [7, 3]}


def test_the_marks_sql_refuses_a_group_that_is_not_topic_partition_worker():
    """The mark's groups reach SQL text unquoted (`InputRows._marks_sql`): a key with a comma or a quote
    would change the query, so one that is not `topic|partition|worker` is refused; an empty mark is null."""
    me, ms = InputRows._marks_sql({"p.winners.out|0|1": [3, 7], "p.winners.out|1|0": [2, 5]}, "g")
    keys = "map_from_arrays(split('p.winners.out|0|1,p.winners.out|1|0', ','), "
    assert me == keys + "CAST(split('3,2', ',') AS ARRAY<BIGINT>))[g] AS __me"
    assert ms == keys + "CAST(split('7,5', ',') AS ARRAY<BIGINT>))[g] AS __ms"
    assert InputRows._marks_sql({}, "g") == ("CAST(NULL AS BIGINT) AS __me", "CAST(NULL AS BIGINT) AS __ms")
    for bad in ("a,b|0|1", "t'|0|1", "t|x|1", "t|0"):
        with pytest.raises(ValueError, match="not topic\\|partition\\|worker"):
            InputRows._marks_sql({bad: [1, 1]}, "g")
