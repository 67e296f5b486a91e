"""What a query's JVM half costs against the same query in Spark's own operators, and what declaring
only the fields it reads saves (issue 22):

    python -m bench.parse_width [--rows 400000] [--rounds 5]

On one local Spark (2 cores), over the same cached batch of NEXMark-shaped bid records, each round
runs, in alternating order (ABBA, so drift hits every variant alike), one Spark job per variant into
Spark's `noop` sink:
- `native`: what bench.nexmark_native runs for the query (from_json with the union schema, whose
  unread fields Spark's optimizer prunes; Q1/Q2 the selection and to_json of the answer; Q7 the
  window aggregation, in batch: Spark's streaming query adds its state store to it);
- `ballast, union schema`: Ballast's epoch for the query up to the routing (Q1/Q2:
  spark_jobs.stateless, parse with the dead-letter test, selection, ids and headers; Q7: the
  processor's parse and JVM pre-aggregation, `ProcessorOperator.keyed`) with `input_schema` = all 18
  NEXMark fields;
- `ballast, declared fields`: the same with the query's own `input_schema` (spark_jobs.nexmark.fields).
Prints each variant's median time over the rounds after the first, and its ratio to `native`
measured in the same rounds. No Kafka: the input is a cached DataFrame, so the figures are the
transformation's alone (the end-to-end cost per event is experiment 7's, `bench.run --only nexmark`).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from typing import Any

QUERIES = ("q1", "q2", "q7")


def _batch(spark: Any, rows: int) -> Any:
    """`rows` bid records as the Kafka source gives them (value = the bid's JSON), cached."""
    from pyspark.sql import functions as F

    bid = F.struct((F.col("id") % 5000).alias("auction"), (F.col("id") % 977).alias("bidder"),
                   (F.col("id") * 7 % 10_000).alias("price"), (F.col("id") * 10).alias("date_time"),
                   F.lit("0123456789abcdef0123456789abcdef").alias("extra"))
    df = spark.range(rows).select(F.lit(None).cast("binary").alias("key"), F.to_json(bid).cast("binary").alias("value"),
                                  F.lit("n.bid").alias("topic"), (F.col("id") % 2).cast("int").alias("partition"),
                                  F.col("id").alias("offset")).repartition(2).cache()
    df.count()
    return df


def bid_rows(app: str, rows: int) -> tuple[Any, Any]:
    """A local Spark for a build or plan benchmark (2 cores, 2 shuffle partitions, no UI) and a cached
    batch of `rows` bids as an epoch's input rows (spark_jobs.inputs, no hand-off): (spark, rows)."""
    from pyspark.sql import SparkSession

    from spark_jobs.inputs import InputRows
    from spark_jobs.nexmark import topics
    from spark_jobs.storage import Location

    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark, InputRows(topics("n").split(","), (), Location.of("/nonexistent-no-hand-off")).rows(
        _batch(spark, rows), -1)


def _native(raw: Any, q: str) -> Any:
    from pyspark.sql import functions as F

    from spark_jobs.nexmark import SCHEMA

    df = raw.select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("r")).select("r.*")
    if q == "q1":
        df = df.select("auction", "bidder", F.expr("CAST(price * 89 DIV 100 AS BIGINT)").alias("price"), "date_time")
    elif q == "q2":
        df = df.where("auction % 123 = 0").select("auction", "price")
    else:  # every bid at the window's top price, as bench.nexmark_native's Q7
        bids = F.collect_list(F.struct("price", "auction", "bidder", "date_time"))
        top = df.withColumn("ts", F.timestamp_millis("date_time")).groupBy(F.window("ts", "10 seconds")).agg(
            F.max("price").alias("top"), bids.alias("all"))
        df = top.select("window", F.explode(F.filter("all", lambda x: x["price"] == F.col("top"))).alias("t"))
    return df.select(F.to_json(F.struct(*df.columns)).alias("value"))


def _ballast(raw: Any, q: str, union: bool) -> Any:
    from spark_jobs.inputs import InputRows
    from spark_jobs.nexmark import SCHEMA, topics
    from spark_jobs.nexmark.stateless import Q1, Q2
    from spark_jobs.nexmark.windows import Q7
    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.stateless import StatelessOperator
    from spark_jobs.storage import Location
    from spark_jobs.timers import EpochClock

    names = topics("n").split(",")
    rows = InputRows(names, (), Location.of("/nonexistent-no-hand-off")).rows(raw, -1)
    if q == "q7":
        declared = getattr(Q7, "ballast_query")  # noqa: B009 - set by spark_jobs.processor.query, unknown to mypy
        spec = dataclasses.replace(declared, input_schema=SCHEMA) if union else declared
        proc = ProcessorOperator(type(Q7.__name__, (Q7,), {"ballast_query": spec}))
        return proc.keyed(rows, EpochClock(1, 2_000_000_000_000, 0))  # nothing late, nothing ahead
    query = Q1 if q == "q1" else Q2
    if union:
        query = dataclasses.replace(query, input_schema=SCHEMA)
    op = StatelessOperator(query)
    return op.finish(op.prepare(rows, names), dead_column=False)


def _timed(df: Any) -> float:
    t0 = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.parse_width", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench.parse_width")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    raw = _batch(spark, a.rows)
    print(f"{a.rows} bid records, {a.rounds} rounds (the first not counted), medians; ratio = variant / native")
    for q in QUERIES:
        variants = {"native": lambda q=q: _native(raw, q),
                    "ballast, union schema": lambda q=q: _ballast(raw, q, union=True),
                    "ballast, declared fields": lambda q=q: _ballast(raw, q, union=False)}
        plan = variants["ballast, declared fields"]()._jdf.queryExecution().executedPlan().toString()
        print(f"{q}  declared fields: from_json {plan.count('from_json(')} time(s) in the executed plan", flush=True)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for i in range(a.rounds):
            for name in (list(variants) if i % 2 == 0 else list(reversed(variants))):
                times[name].append(_timed(variants[name]()))
        base = statistics.median(times["native"][1:])
        for name, ts in times.items():
            m = statistics.median(ts[1:])
            print(f"{q}  {name:26s} {m * 1000:7.0f} ms  ratio {m / base:.2f}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
