"""What an epoch's plan costs the driver: a stateless query's expressions built inside `foreachBatch`
(the runner before spark_jobs.stream_plan: every DataFrame step is analysed again for each batch) against
the runner's split: the expressions applied once to the streaming DataFrame (Spark analyses them once,
at start; the batch only adds its epoch to the ids). Same Kafka backlog, same output records, one
process each, one after the other:

    python -m bench.epoch_plan [--events 60000] [--max-offsets 5000]

Prints, per mode, the median driver time to build the batch's DataFrame and the median time of
its write job over the batches after the first two (which pay the start-up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.infra import PY, REPO, ensure_topics, env, kafka_up


def run(mode: str, bootstrap: str, prefix: str, max_offsets: int) -> dict[str, Any]:
    """One streaming query over `<prefix>.bid` in this process; returns its per-batch timings."""
    from spark_jobs import id_sink
    from spark_jobs.inputs import InputRows
    from spark_jobs.nexmark import topics as nexmark_topics
    from spark_jobs.nexmark.stateless import Q1
    from spark_jobs.session import build_spark
    from spark_jobs.stateless import StatelessOperator
    from spark_jobs.storage import Location
    from spark_jobs.stream_plan import StreamPlan

    topics = nexmark_topics(prefix).split(",")
    out, dlq = f"{prefix}.{mode}.out", f"{prefix}.{mode}.dlq"
    spark = build_spark(f"bench-epoch-plan-{mode}")
    op = StatelessOperator(Q1)
    inputs = InputRows(topics, (), Location.of(tempfile.mkdtemp(prefix="ballast-epoch-plan-")))
    src = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topics[2])
           .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(max_offsets)).load())
    times: list[tuple[float, float]] = []

    def write(rows: Any, epoch: int, t0: float) -> None:
        t1 = time.perf_counter()
        id_sink.writer(rows, epoch, bootstrap, {}, out, dlq).save()  # the runner's writer
        times.append(((t1 - t0) * 1000, (time.perf_counter() - t1) * 1000))

    if mode == "inside":
        def batch(df: Any, epoch: int) -> None:
            t0 = time.perf_counter()
            write(op.rows(inputs.rows(df, epoch), topics).drop("__dead"), epoch, t0)
        stream = src
    else:  # the runner's split (spark_jobs.stream_plan): the expressions once, on the stream; the epoch adds its ids
        plan = StreamPlan(op, inputs, topics)

        def batch(df: Any, epoch: int) -> None:
            t0 = time.perf_counter()
            write(plan.epoch(df, epoch), epoch, t0)
        stream = plan.stream(src)
    query = (stream.writeStream.foreachBatch(batch).option("checkpointLocation", tempfile.mkdtemp())
             .trigger(availableNow=True).start())
    query.awaitTermination()
    spark.stop()
    steady = times[2:] or times
    return {"mode": mode, "batches": len(times), "build_ms_median": statistics.median(b for b, _ in steady),
            "write_ms_median": statistics.median(w for _, w in steady)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.epoch_plan", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=60_000, help="bids in the backlog")
    ap.add_argument("--max-offsets", type=int, default=5_000, help="bids per batch")
    ap.add_argument("--mode", choices=("inside", "stream"), help=argparse.SUPPRESS)  # one child process
    ap.add_argument("--prefix", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.mode:
        print(json.dumps(run(a.mode, a.bootstrap, a.prefix, a.max_offsets)), flush=True)
        return 0
    from kafka import KafkaProducer

    bootstrap = kafka_up()
    prefix = f"bench-epoch-plan-{int(time.time())}"
    ensure_topics({f"{prefix}.{k}": 2 for k in ("person", "auction", "bid", "inside.out", "inside.dlq", "stream.out",
                                                "stream.dlq")}, bootstrap)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    for i in range(a.events):
        producer.send(f"{prefix}.bid", key=b"%d" % (i % 100), value=json.dumps(
            {"auction": i % 100, "bidder": i, "price": 1000 + i, "date_time": i}).encode())
    producer.flush()
    producer.close()
    res = {}
    for mode in ("inside", "stream"):
        done = subprocess.run([PY, "-m", "bench.epoch_plan", "--mode", mode, "--prefix", prefix, "--bootstrap",
                               bootstrap, "--max-offsets", str(a.max_offsets)], cwd=REPO, env=env(),
                              capture_output=True, text=True, check=True)
        res[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        r = res[mode]
        print(f"{mode:>6}: {r['batches']} batches, driver build {r['build_ms_median']:.0f} ms, "
              f"write job {r['write_ms_median']:.0f} ms (medians after the first two)", flush=True)
    ratio = res["inside"]["build_ms_median"] / max(res["stream"]["build_ms_median"], 1e-9)
    print(f"building the plan inside foreachBatch costs {ratio:.1f}x building it once on the stream", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
