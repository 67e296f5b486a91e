"""Transactional output: each task of a keyed epoch writes its outputs and dead letters in one
Kafka transaction together with a commit marker, so a `read_committed` consumer sees every output
of the job exactly once, with no deduplication (docs/dataplane.md, "Transactional output").

The tasks' writer is a Spark data source in the JVM (jvm/ballast-sink, `TxnKafkaSink`; built by
`make setup`): the keyed stage's Python workers yield their records (`spark_jobs.output.kafka_rows`)
and the same task writes them. Why not from Python: every record was a kafka-python send (~17 µs),
thousands per task in a saturated epoch, and the task's commit waited for them; the Java client
batches them as Spark's own sink does (docs/benchmarks.md).

Per worker slot w of an operator there is one transactional id, `ballast.<job>.<operator>.w<w>`
(`transactional_id`), and one partition, w, of the marker topic `<output topic>.commits`
(`commits_topic`; compacted, written only under that id). A task of epoch e for slot w:

1. gets the slot's producer: a new one calls `initTransactions()`, which fences every earlier
   producer of the id (a zombie or speculative attempt can no longer commit) and completes or
   aborts its open transaction, then reads partition w of the marker topic `read_committed`: the
   last marker is the highest epoch committed for w (markers of one slot are written in epoch
   order: an epoch's tasks start after every task of the epoch before succeeded);
2. if that marker is this store's and its epoch >= e, the outputs of (e, w) are visible already:
   it writes nothing (a replay after a crash between the Kafka commit and the manifest);
3. otherwise, in one transaction: every output and dead letter, plus the marker (store id, e, w)
   on partition w; then, only if every one of those sends was acknowledged, `commitTransaction()`.

An executor keeps a slot's producer for its next task and skips step 1 with it: while no other
producer has initialised the id, no other producer can have committed for the slot; if another
one has, the broker refuses the kept producer's transaction (fenced), and the task starts again
at step 1 with a new producer. Any error in the transaction is handled the same way (a commit
whose outcome is unknown is found by the marker read), until `--kafka-outage-s` has passed.

The marker carries the durable store's id: a new deployment under the same job name (a new
checkpoint and store) does not mistake the old deployment's markers for its own.
"""

from __future__ import annotations

from typing import Any

from spark_jobs.txn_slots import RETRY_BACKOFF_MS, TxnTarget

#: `--output-mode`: keyed operators' outputs in Kafka transactions (the default), or written by
#: Spark's Kafka sink (at least once; consumers deduplicate by `ballast-id`)
TRANSACTIONAL = "transactional"
AT_LEAST_ONCE = "at-least-once"
OUTPUT_MODES = (TRANSACTIONAL, AT_LEAST_ONCE)
#: partitions of a new marker topic; the driver adds partitions when an epoch has more task slots
COMMITS_PARTITIONS = 8
#: the tasks' writer (a class in the ballast-sink jar, spark_jobs.session.connector_jars)
SINK_FORMAT = "io.ballast.sink.TxnKafkaSink"


def commits_topic(output_topic: str) -> str:
    """The marker topic of an operator's output topic (`<job>.output.commits`)."""
    return f"{output_topic}.commits"


def writer(rows: Any, epoch: int, t: TxnTarget, kafka_options: dict[str, str]) -> Any:
    """The DataFrameWriter that commits `rows` (`spark_jobs.output.OUTPUT_SCHEMA`, one partition per
    worker slot: the keyed stage's tasks) as epoch `epoch`'s outputs; `save()` it. `kafka_options`:
    the producer's settings as Spark's sink takes them (`kafka.*`)."""
    return (rows.write.format(SINK_FORMAT).mode("append").option("kafka.bootstrap.servers", t.bootstrap)
            .options(**kafka_options).option("job", t.job).option("operator", t.operator)
            .option("store", t.store_id).option("commits.topic", t.commits_topic).option("epoch", str(int(epoch)))
            .option("outage.ms", str(int(t.outage_s * 1000))))


def close_clients(spark: Any) -> None:
    """Closes the transactional producers and marker readers the driver's JVM keeps for idle slots
    (the executors' in local mode, the tests'): a stopped job's clients would retry a broker that
    went away until the JVM ends. Executors of a cluster close theirs when they end, or after
    two idle minutes."""
    spark._jvm.io.ballast.sink.TxnKafkaSink.closeClients()


def ensure_commit_partitions(bootstrap: str, topic: str, partitions: int, client_kwargs: dict[str, Any]) -> int:
    """Give the marker topic at least `partitions` partitions (one per task slot); returns a count it
    has at least (the metadata of a topic created a moment ago can still list only some of its
    partitions: the caller asks again when an epoch needs more)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewPartitions
    from kafka.errors import InvalidPartitionsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, retry_backoff_ms=RETRY_BACKOFF_MS, **client_kwargs)
    try:
        have = len(admin.describe_topics([topic])[0]["partitions"])
        if have < partitions:
            try:
                admin.create_partitions({topic: NewPartitions(total_count=partitions)})
            except InvalidPartitionsError:  # a racing driver added them
                pass
            have = partitions
        return have
    finally:
        admin.close()
