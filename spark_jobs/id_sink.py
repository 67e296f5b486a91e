"""Ballast's Kafka writer for a stateless query's epoch (jvm/ballast-sink, built by `make setup`).

It writes the records Spark's own Kafka sink would (topic, key, value), and gives each the headers
of docs/dataplane.md — `ballast-id = <epoch>:<p>:<o>`, and a dead letter's reason, error, epoch and
source — made in the JVM from the row's id columns. Why not Spark's sink with a `headers` column:
the query then projects an array of header structs per row, and the sink turns each into Strings
and Scala collections; with the one id header that write cost 1.57-1.82x the same write without
it, this one 1.23-1.27x (`python -m bench.sink_headers`, docs/benchmarks.md), and the write is
most of a stateless epoch (NEXMark Q1, Q2). Delivery is Spark's sink's: a task's sends are flushed before it
commits and a failed send fails the task, so a replayed epoch re-sends the same ids.
"""

from __future__ import annotations

from typing import Any

#: the writer's Spark data source (a class in the ballast-sink jar, spark_jobs.session.connector_jars)
SINK_FORMAT = "io.ballast.sink.IdKafkaSink"

#: the columns it reads: the record's key and value, the id's routed input partition and offset,
#: and a dead letter's reason (null: an output), error detail and source record. A `topic` column
#: is optional (the writer's `topic` and `dead-letter-topic` options otherwise): an epoch's rows have
#: none, since a per-row topic cost ~10 % of the write (`python -m bench.sink_headers`, ballast_topic)
COLUMNS = ("key", "value", "__p", "__o", "__reason", "__detail", "__source")


def writer(rows: Any, epoch: int, bootstrap: str, kafka_options: dict[str, str], topic: str | None = None,
           dead_letter_topic: str | None = None) -> Any:
    """The DataFrameWriter that writes `rows` (COLUMNS) as epoch `epoch`'s records to `topic`, the
    dead letters among them to `dead_letter_topic`; `save()` it. `kafka_options`: the producer's
    settings as Spark's sink takes them (`kafka.*`). Without a topic, the rows must name theirs."""
    w = (rows.write.format(SINK_FORMAT).mode("append").option("kafka.bootstrap.servers", bootstrap)
         .options(**kafka_options).option("epoch", str(int(epoch))))
    if topic is not None:
        w = w.option("topic", topic)
    if dead_letter_topic is not None:
        w = w.option("dead-letter-topic", dead_letter_topic)
    return w
