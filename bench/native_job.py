"""Spark's own stateful aggregation, as the baseline: `groupBy(key).count()` over the same Kafka
input, RocksDB state store, update mode, noop sink (`python -m bench.native_job run ...`), or a Kafka
sink (`--output-topic`: key, count as text) when the latency of its answers is measured.

Every finished micro-batch's progress (StreamingQueryProgress JSON) is appended to a JSONL file,
which is what the benchmark reads: rows, durations, state-operator partitions, source offsets.

`python -m bench.native_job repartition --checkpoint D --partitions N` is Spark 4.2's *offline*
state repartitioning (`SparkSession._streamingCheckpointManager.repartition`, experimental, the
query must be stopped): the only way Spark offers to change a stateful query's state
parallelism without losing its state. Starting the query with a different
`spark.sql.shuffle.partitions` does nothing: the value is frozen in the checkpoint's offset log.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from ballast.options import settings


def session(partitions: int, app: str):  # type: ignore[no-untyped-def]
    from spark_jobs.session import build_spark

    return build_spark(app, conf={
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    })


def run(a: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    spark = session(a.partitions, "bench-native")
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", a.bootstrap)
              .option("subscribe", a.topic).option("startingOffsets", "earliest").option("failOnDataLoss", "false"))
    if a.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(a.max_offsets_per_trigger))
    counts = reader.load().groupBy(F.col("key")).count()
    if a.output_topic:  # the answers, visible to a consumer: what the latency benchmark times
        sink = (counts.select(F.col("key"), F.col("count").cast("string").alias("value")).writeStream
                .format("kafka").option("kafka.bootstrap.servers", a.bootstrap).option("topic", a.output_topic))
    else:
        sink = counts.writeStream.format("noop")
    # trigger 0: as fast as possible (the next batch starts as soon as the previous one ends)
    q_builder = (sink.outputMode("update").option("checkpointLocation", a.checkpoint)
                 .trigger(processingTime=f"{a.trigger_ms} milliseconds"))
    out = Path(a.progress)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    state = {"total": 0}
    lock = threading.Lock()
    fh = out.open("a")

    from pyspark.sql.streaming import StreamingQueryListener

    class Progress(StreamingQueryListener):  # every finished micro-batch, in order, none missed
        def onQueryStarted(self, event):  # type: ignore[no-untyped-def]
            # the query runs: a benchmark may start its load now (the start-up is not measured)
            Path(f"{a.progress}.started").write_text(str(time.time()))

        def onQueryProgress(self, event):  # type: ignore[no-untyped-def]
            p = json.loads(event.progress.json)
            p["bench_seen_at"] = time.time()
            with lock:
                fh.write(json.dumps(p) + "\n")
                fh.flush()
                state["total"] += int(p.get("numInputRows", 0))

        def onQueryIdle(self, event):  # type: ignore[no-untyped-def]
            pass

        def onQueryTerminated(self, event):  # type: ignore[no-untyped-def]
            pass

    spark.streams.addListener(Progress())
    q = q_builder.start()
    t_start = time.time()
    while q.isActive and not stop.is_set():
        time.sleep(0.1)
        if a.until_rows and state["total"] >= a.until_rows:
            break
        if a.duration_s and time.time() - t_start > a.duration_s:
            break
    # graceful stop: do not interrupt a running micro-batch (an uncommitted last batch makes the
    # offline repartition refuse the checkpoint). Under a backlog the next batch starts the moment
    # one ends, so there may be no gap to stop in: after 20 s the batch is interrupted, and
    # `repartition` then runs without the exactly-once-sink check (noop sink: nothing to duplicate)
    deadline = time.time() + 20
    while q.isActive and q.status.get("isTriggerActive") and time.time() < deadline:
        time.sleep(0.01)
    q.stop()
    exc = q.exception()
    fh.close()
    spark.stop()
    if exc is not None:
        print(f"query failed: {exc}", file=sys.stderr)
        return 1
    return 0


def repartition(a: argparse.Namespace) -> int:
    spark = session(a.partitions, "bench-native-repartition")
    t0 = time.time()
    spark.streams.active  # noqa: B018 - creates the StreamingQueryManager, which registers the
    # StateStoreCoordinator RPC endpoint the repartition's state stores report to
    mgr = spark._streamingCheckpointManager  # noqa: SLF001 (4.2: experimental, not public yet)
    enforced = True
    try:
        mgr.repartition(a.checkpoint, a.partitions)
    except Exception as exc:  # noqa: BLE001
        if "LAST_BATCH_FAILED" not in str(exc):
            raise
        # the stop interrupted a batch; with a noop sink there is no output to duplicate
        enforced = False
        mgr.repartition(a.checkpoint, a.partitions, False)
    print(json.dumps({"repartition_s": time.time() - t0, "partitions": a.partitions,
                      "enforce_exactly_once_sink": enforced}))
    spark.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.native_job")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--topic", required=True)
    r.add_argument("--bootstrap", default=settings().kafka_bootstrap)
    r.add_argument("--checkpoint", required=True)
    r.add_argument("--partitions", type=int, default=2)
    r.add_argument("--trigger-ms", type=int, default=500)
    r.add_argument("--max-offsets-per-trigger", type=int, default=None)
    r.add_argument("--progress", required=True)
    r.add_argument("--output-topic", default=None, help="write the counts to this Kafka topic (default: noop sink)")
    r.add_argument("--until-rows", type=int, default=None, help="stop once this many rows were read")
    r.add_argument("--duration-s", type=float, default=None)
    rp = sub.add_parser("repartition")
    rp.add_argument("--checkpoint", required=True)
    rp.add_argument("--partitions", type=int, required=True)
    a = ap.parse_args(argv)
    return run(a) if a.cmd == "run" else repartition(a)


if __name__ == "__main__":
    sys.exit(main())
