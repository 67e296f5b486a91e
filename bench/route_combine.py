"""What a pre-aggregating query's epoch costs with its combine before the routing (two shuffles)
against after it (one shuffle, spark_jobs.pre_aggregate), in Spark's JVM (issue 22):

    python -m bench.route_combine [--rows 20000] [--rounds 16]

On one local Spark (2 cores), over the same cached batch of NEXMark-shaped bid records, each round
runs both variants of NEXMark Q7 and Q5 (ABBA order, so drift hits both alike), each one Spark job
through the epoch's own code up to the workers: parse, late filter, combine and routing
(spark_jobs.routing.route) into a `mapInArrow` task that reads its batches and writes nothing.
- `two shuffles`: `ProcessorOperator.keyed` (the combine by groups, Spark's map-side aggregation
  and its shuffle), then the routing's shuffle by worker: the epoch's plan before 2026-11-29;
- `one shuffle`: the epoch's plan now: each record routed, each worker's partition combined in
  the routing's stage.
Prints each variant's median time over the rounds after the first and the ratio one ÷ two. No
Kafka and no fold: the end-to-end cost per event is experiment 7's (`bench.run --only nexmark`).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from typing import Any

from bench.parse_width import _timed, bid_rows

VARIANTS = ("two shuffles", "one shuffle")


def _task(batches: Any) -> Any:
    """A worker that reads its rows and writes none (the fold is not what is compared)."""
    import pyarrow as pa

    from spark_jobs.output import kafka_arrow_schema

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([], kafka_arrow_schema())


def plan(src: Any, query: type, variant: str) -> Any:
    """One epoch's DataFrame for `query` (a pre-aggregating processor) in `variant`."""
    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.routing import route
    from spark_jobs.timers import EpochClock

    op = ProcessorOperator(query)
    clock = EpochClock(1, 2_000_000_000_000, 0)  # nothing late, nothing ahead
    assignment = [0, 1] * 128  # 256 bins over 2 workers
    if variant == "one shuffle":
        return route(op.key(op.prepare(src), clock), 8, assignment, 2, _task, combine=op.combine)
    return route(op.keyed(src, clock), 8, assignment, 2, _task)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.route_combine", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000, help="bids per epoch (the full profile's batch)")
    ap.add_argument("--rounds", type=int, default=16)
    a = ap.parse_args(argv)
    from spark_jobs.nexmark.windows import Q5, Q7

    spark, src = bid_rows("bench.route_combine", a.rows)
    print(f"{a.rows} bid records, {a.rounds} rounds (the first not counted), medians")
    for name, q in (("q7", Q7), ("q5", Q5)):
        for v in VARIANTS:
            shown = plan(src, q, v)._jdf.queryExecution().executedPlan().toString()
            shuffles = len(re.findall(r"Exchange (?!RoundRobinPartitioning)", shown))  # not the cached batch's
            print(f"{name}  {v}: {shuffles} exchange(s) in the plan", flush=True)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for i in range(a.rounds):
            for v in (VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))):
                times[v].append(_timed(plan(src, q, v)))
        med = {v: statistics.median(ts[1:]) for v, ts in times.items()}
        for v in VARIANTS:
            print(f"{name}  {v:12s} {med[v] * 1000:7.0f} ms", flush=True)
        print(f"{name}  one / two {med['one shuffle'] / med['two shuffles']:.3f}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
