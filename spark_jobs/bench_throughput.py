"""Steady-state throughput of Ballast key-count vs Spark's native stateful count, and bin-move cost.

Same input, same run, same SparkSession: a topic of `--records` records over `--keys` keys (the
first `--keys` records create every key once, the rest are uniform), read with the same
maxOffsetsPerTrigger by
  * Ballast: KeyCount at W workers (routing + LMDB stores + outbox + Kafka outputs + metrics), and
  * Spark: `groupBy(key).count()` with the RocksDB state store provider, update mode, noop sink.
Steady state = epochs after every key exists. Then, on the Ballast job, one step that moves one
bin (1/B of the state) and one all-at-once step that moves half the bins; their checkpoints give
time and bytes. Run (Kafka up, `scripts/stack.py up kafka`):

    .venv/bin/python -m spark_jobs.bench_throughput [--records 3000000 --keys 1000000 --batch 200000]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy import select

log = logging.getLogger("ballast.bench")


def produce(spark, bootstrap: str, topic: str, records: int, keys: int) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    df = spark.range(records).select(
        F.when(F.col("id") < keys, F.col("id")).otherwise(F.floor(F.rand(7) * keys)).cast("long").alias("k"))
    (df.select(F.concat(F.lit("key-"), F.col("k").cast("string")).cast("binary").alias("key"),
               F.lit(b"1").cast("binary").alias("value"))
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save())


def steady_rate(rows_and_times: list[tuple[int, float, float]], skip_rows: int) -> tuple[float, int, int]:
    """rows/s over the epochs that start after `skip_rows` rows were consumed: (rate, rows, epochs)."""
    seen = 0
    rows = 0
    t0 = t1 = None
    n = 0
    for r, start, end in rows_and_times:
        if seen >= skip_rows and r > 0:
            rows += r
            t0 = start if t0 is None else t0
            t1 = end
            n += 1
        seen += r
    if not rows or t0 is None or t1 is None or t1 <= t0:
        return 0.0, rows, n
    return rows / (t1 - t0), rows, n


def run_ballast(spark, args, bootstrap: str, topic: str, root: Path, db_url: str) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    from ballast.protocol import ControlStep, Move
    from migrations_db import models as m
    from migrations_db.db import session_scope
    from spark_jobs.runner import JobConfig, start_job
    from spark_jobs.bins import uniform_assignment
    from kafka import KafkaProducer
    from ballast.protocol import control_topic, message_key

    job = f"bench-{uuid.uuid4().hex[:6]}"
    cfg = JobConfig(job=job, input_topic=topic, checkpoint_dir=str(root / job), bootstrap=bootstrap, db_url=db_url,
                    bins=args.bins, workers=args.workers, trigger_ms=0, max_offsets_per_trigger=args.batch,
                    output_partitions=2)
    runner = start_job(spark, cfg)

    def epochs() -> list:  # type: ignore[type-arg]
        with session_scope(db_url) as s:
            return list(s.scalars(select(m.EpochMetrics).where(m.EpochMetrics.job == job).order_by(m.EpochMetrics.epoch)))

    try:
        deadline = time.time() + args.timeout
        while sum(e.input_rows for e in epochs()) < args.records:
            if runner.query.exception() is not None:
                raise RuntimeError(runner.query.exception())
            if time.time() > deadline:
                raise TimeoutError("ballast run did not finish")
            time.sleep(1)
        eps = epochs()
        rate, rows, n = steady_rate([(e.input_rows, e.started_at.timestamp(), e.ended_at.timestamp()) for e in eps],
                                    args.keys)
        steady_batch_ms = sorted(e.batch_ms for e in eps[-n:])[n // 2] if n else 0.0
        # moves: one bin, then half the bins all at once
        a = uniform_assignment(args.bins, args.workers)
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        results = {"steady_batch_ms_median": steady_batch_ms}
        version = 0
        for name, bins in (("one_bin", [0]), ("half_bins", list(range(1, args.bins, 2)))):
            moves = tuple(Move(b, a[b], (a[b] + 1) % args.workers) for b in bins)
            now = datetime.now(timezone.utc)
            step = ControlStep(job=job, operator="keycount", plan_id=f"bench-{name}", step=1, steps=1, kind="moves",
                               moves=moves, workers=args.workers, map_version=version, issued_at=now, effective_at=now)
            producer.send(control_topic(job), key=message_key(job, "keycount"), value=step.to_json()).get(timeout=30)
            while True:
                with session_scope(db_url) as s:
                    c = s.get(m.Checkpoint, (job, "keycount", step.plan_id, 1))
                    if c is not None:
                        e = s.get(m.EpochMetrics, (job, "keycount", c.applied_epoch)) if c.applied_epoch is not None else None
                        results[name] = {"status": c.status, "bins": c.bins_moved, "keys": c.keys_moved,
                                         "bytes": c.bytes_moved, "migration_ms": round(c.migration_ms, 1),
                                         "epoch_batch_ms": round(e.batch_ms, 1) if e else None}
                        break
                if time.time() > deadline:
                    raise TimeoutError(f"checkpoint of {name} did not arrive")
                time.sleep(0.5)
            for mv in moves:
                a[mv.bin] = mv.dst
            version += 1
        producer.close()
        results.update(rows=rows, epochs=n)
        return rate, results
    finally:
        runner.stop()


def run_native(spark, args, bootstrap: str, topic: str, root: Path) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    old_parts = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", str(args.workers))
    try:
        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(args.batch)).load())
        q = (df.groupBy("key").count().writeStream.format("noop").outputMode("update")
             .option("checkpointLocation", str(root / "native-ckpt")).start())
        deadline = time.time() + args.timeout
        progress: list[dict] = []  # type: ignore[type-arg]
        seen = set()
        while sum(p["numInputRows"] for p in progress) < args.records:
            if q.exception() is not None:
                raise RuntimeError(q.exception())
            if time.time() > deadline:
                raise TimeoutError("native run did not finish")
            for p in q.recentProgress:
                if p["batchId"] not in seen:
                    seen.add(p["batchId"])
                    progress.append(p)
            time.sleep(0.5)
        q.stop()
        progress.sort(key=lambda p: p["batchId"])
        rows_times = []
        for p in progress:
            end = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() + p["durationMs"]["triggerExecution"] / 1000
            start = end - p["durationMs"]["triggerExecution"] / 1000
            rows_times.append((p["numInputRows"], start, end))
        rate, rows, n = steady_rate(rows_times, args.keys)
        return rate, {"rows": rows, "epochs": n}
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", old_parts)
        spark.conf.unset("spark.sql.streaming.stateStore.providerClass")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=200_000, help="maxOffsetsPerTrigger for both queries")
    ap.add_argument("--bins", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2, help="input topic partitions")
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--dir", default=None)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    from spark_jobs.cli import setup_logging

    setup_logging()
    import importlib.util
    import sys

    from migrations_db.db import migrate
    from spark_jobs.session import build_spark

    repo = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location("ballast_stack", repo / "scripts" / "stack.py")
    stack = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["ballast_stack"] = stack
    spec.loader.exec_module(stack)  # type: ignore[union-attr]

    root = Path(tempfile.mkdtemp(prefix="ballast-bench-", dir=args.dir))
    db_url = f"sqlite:///{root / 'metrics.db'}"
    migrate(db_url)
    topic = f"bench-in-{uuid.uuid4().hex[:6]}"
    stack.ensure_topics({topic: args.partitions}, args.bootstrap)
    spark = build_spark("ballast-bench", conf={"spark.ui.showConsoleProgress": "false"})
    t = time.time()
    produce(spark, args.bootstrap, topic, args.records, args.keys)
    log.info("produced %d records over %d keys to %s in %.1fs", args.records, args.keys, topic, time.time() - t)
    native, nres = run_native(spark, args, args.bootstrap, topic, root)
    print(f"spark-native groupBy(key).count() RocksDB: {native:,.0f} rows/s steady ({nres})", flush=True)
    ballast, bres = run_ballast(spark, args, args.bootstrap, topic, root, db_url)
    print(f"ballast keycount W={args.workers} B={args.bins}: {ballast:,.0f} rows/s steady "
          f"(rows={bres['rows']}, epochs={bres['epochs']}, median batch {bres['steady_batch_ms_median']:.0f} ms)", flush=True)
    print(f"ratio ballast/native = {ballast / native:.2f}" if native else "ratio: native rate unavailable", flush=True)
    for name in ("one_bin", "half_bins"):
        print(f"move {name}: {bres[name]}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
