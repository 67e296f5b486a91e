"""What an output record's `ballast-id` header costs Spark's Kafka sink, against the same records
without it (NEXMark Q1/Q2's outputs are the case: their epoch is one Spark job, mostly this write).

`python -m bench.sink_headers [--rows 400000] [--rounds 5] [--bootstrap HOST:PORT]` starts the bench
broker (bench.infra.kafka_up) unless given one, caches `rows` records shaped like Q1's output (a
~90-byte JSON value, the source partition and offset), then writes them (Spark's Kafka sink, or
Ballast's writer for `ballast`) once per variant per round, the order rotated every round, each to a
fresh topic. Per write it takes the driver JVM's CPU time (local mode: the JVM runs the tasks and
the producer); per variant it prints the median over the rounds and the ratio to `value` (no
header), what Spark's own query writes.

Variants: `value` (no header); `ballast` (the data plane's own write, spark_jobs.id_sink: Ballast's
Kafka writer makes the header `ballast-id` = `"<epoch>:<p>:<o>"` in the JVM from the id's columns);
`ballast_topic` (the same with the topic in a column of every row, as the data plane's epoch had it
until 2026-12-01: the output topic, or the dead-letter topic for a dead letter);
`spark_sink` (the same header projected in SQL as an array of structs, written by Spark's sink: what
the data plane did before the writer); `const` (one constant header: what the header itself costs,
whatever its value); `binary` (the id as 20 bytes, epoch, partition and offset big-endian); and the
text id without a header, `in_key` (as the record's key) and `in_value` (in front of the value).
Ballast's writer batches more than Kafka's defaults (jvm/ballast-sink Producers.BATCHING):
`ballast_unbatched` is its write with Kafka's defaults, `value_batched` Spark's sink with Ballast's
batching. Each write's wall time is printed beside its CPU (the broker's work per request is in it).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

EPOCH = 7  # the epoch every variant's id names


def _id() -> str:
    """The id `<epoch>:<p>:<o>` as text, in SQL."""
    return f"CAST(concat_ws(':', '{EPOCH}', __p, __o) AS BINARY)"


def _header(value: str) -> str:
    return f"array(named_struct('key', 'ballast-id', 'value', {value})) AS headers"


def _ballast(df: Any, topic: str = "") -> Any:
    """The data plane's rows (StatelessOperator.prepare's columns, spark_jobs.id_sink.COLUMNS) for
    records that are no dead letters; the topic is the write's option, as in the other variants,
    unless `topic` (SQL) gives each row its own, as the data plane's rows did until 2026-12-01."""
    from spark_jobs.stateless import StatelessOperator

    cols = ["CAST(NULL AS BINARY) AS key", "value", "__p", "__o", "CAST(NULL AS STRING) AS __reason",
            "CAST(NULL AS STRING) AS __detail", "CAST(NULL AS STRING) AS __source"]
    rows = df.selectExpr(*cols, *([f"{topic} AS topic"] if topic else []))
    return StatelessOperator.finish(rows, dead_column=False)


#: the topic column the data plane's rows had until 2026-12-01: the output topic unless the row is a
#: dead letter (none is here)
ROW_TOPIC = "CASE WHEN __o < 0 THEN 'sinkh.dlq' ELSE '{topic}' END"


#: each variant: what the sink writes from the cached rows, given the write's topic
VARIANTS: dict[str, Callable[[Any, str], Any]] = {
    "value": lambda df, topic: df.select("value"),
    "ballast": lambda df, topic: _ballast(df),
    "ballast_topic": lambda df, topic: _ballast(df, ROW_TOPIC.format(topic=topic)),
    "spark_sink": lambda df, topic: df.selectExpr("value", _header(_id())),
    "const": lambda df, topic: df.selectExpr("value", _header(f"CAST('{EPOCH}:0:0' AS BINARY)")),
    "binary": lambda df, topic: df.selectExpr("value", _header(
        f"concat(unhex(lpad(hex({EPOCH}), 16, '0')), unhex(lpad(hex(__p), 8, '0')), unhex(lpad(hex(__o), 16, '0')))")),
    "in_key": lambda df, topic: df.selectExpr("value", f"{_id()} AS key"),
    "in_value": lambda df, topic: df.selectExpr(f"concat({_id()}, value) AS value"),
    "value_batched": lambda df, topic: df.select("value"),
    "ballast_unbatched": lambda df, topic: _ballast(df),
}

#: Ballast's writers' batching (jvm/ballast-sink Producers.BATCHING: up to 512 KiB per partition's
#: batch, 5 ms to fill one) and Kafka's own defaults (16 KiB, no wait), which Spark's sink uses
BATCHED = {"kafka.batch.size": str(512 * 1024), "kafka.linger.ms": "5"}
KAFKA_DEFAULTS = {"kafka.batch.size": "16384", "kafka.linger.ms": "0"}
#: the producer settings of the variants that do not write with their writer's own
PRODUCER = {"value_batched": BATCHED, "ballast_unbatched": KAFKA_DEFAULTS}

#: the variants Ballast's own writer writes (the others: Spark's Kafka sink)
OWN_WRITER = ("ballast", "ballast_topic", "ballast_unbatched")


def _jvm_cpu_s(spark: Any) -> float:
    """The driver JVM's CPU seconds so far (user + system), found by its own pid."""
    import psutil

    return float(sum(psutil.Process(spark.sparkContext._jvm.ProcessHandle.current().pid()).cpu_times()[:2]))


def rows_like_q1(spark: Any, n: int) -> Any:
    """`n` cached rows: Q1's output value (a bid with its price in euros) and the source position."""
    from pyspark.sql import functions as F

    i = F.col("id")
    bid = F.struct((i % 1000).alias("auction"), (i % 5000).alias("bidder"), (i * 0.908).alias("price"),
                   (i * 7 + 1_700_000_000_000).alias("dateTime"), F.lit("channel-1").alias("extra"))
    df = spark.range(n).select(F.to_json(bid).cast("binary").alias("value"), (i % 4).cast("int").alias("__p"),
                               i.alias("__o"))
    df = df.cache()
    df.count()
    return df


def write(df: Any, variant: str, bootstrap: str, topic: str) -> tuple[float, float]:
    """The driver JVM's CPU seconds and the wall seconds for one write of `df` as `variant`."""
    from spark_jobs import id_sink

    out = VARIANTS[variant](df, topic)
    opts = PRODUCER.get(variant, {})
    t0, w0 = _jvm_cpu_s(df.sparkSession), time.perf_counter()
    if variant in OWN_WRITER:
        id_sink.writer(out, EPOCH, bootstrap, opts, topic, f"{topic}.dlq").save()
    else:
        (out.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .options(**opts).save())
    return _jvm_cpu_s(df.sparkSession) - t0, time.perf_counter() - w0


def measure(spark: Any, bootstrap: str, rows: int, rounds: int, names: list[str],
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """`rounds` writes of `rows` records per variant in `names` (order rotated per round); logs a
    JSON line per round and returns the medians, their ratios to `value`, and each variant's last topic."""
    from bench.infra import ensure_topics

    df = rows_like_q1(spark, rows)
    tag = uuid.uuid4().hex[:6]
    ensure_topics({f"sinkh-{tag}-warm": 4}, bootstrap)
    write(df, "value", bootstrap, f"sinkh-{tag}-warm")  # class loading and the producer's first connection
    cpu: dict[str, list[float]] = {n: [] for n in names}
    wall: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            topic = f"sinkh-{tag}-{n}-{r}"
            ensure_topics({topic: 4}, bootstrap)
            c, w = write(df, n, bootstrap, topic)
            cpu[n].append(c)
            wall[n].append(w)
        log(json.dumps({"round": r, **{n: round(cpu[n][-1], 3) for n in names}}))
    df.unpersist()
    base = statistics.median(cpu["value"]) if "value" in cpu else None
    wbase = statistics.median(wall["value"]) if "value" in wall else None
    median = {n: {"cpu_s": round(statistics.median(v), 3),
                  "ratio": round(statistics.median(v) / base, 3) if base else None,
                  "wall_s": round(statistics.median(wall[n]), 3),
                  "wall_ratio": round(statistics.median(wall[n]) / wbase, 3) if wbase else None}
              for n, v in cpu.items()}
    return {"rows": rows, "rounds": rounds, "median": median,
            "topics": {n: f"sinkh-{tag}-{n}-{rounds - 1}" for n in names}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--bootstrap", help="a running broker (default: the bench broker, started if need be)")
    args = ap.parse_args(argv)
    names = args.variants.split(",")
    unknown = set(names) - set(VARIANTS)
    if unknown:
        ap.error(f"unknown variant(s) {sorted(unknown)}; choose from {list(VARIANTS)}")
    from bench.infra import kafka_up
    from spark_jobs.session import build_spark

    bootstrap = args.bootstrap or kafka_up()
    spark = build_spark("ballast-sink-headers", conf={"spark.ui.showConsoleProgress": "false"})
    try:
        res = measure(spark, bootstrap, args.rows, args.rounds, names, lambda line: print(line, flush=True))
        print(json.dumps(res))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
