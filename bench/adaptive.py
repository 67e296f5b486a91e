"""What adaptive query execution (AQE) costs an epoch's Spark job (issue 22, item 4):

    python -m bench.adaptive [--rows 20000 2000] [--rounds 16]

An epoch is a batch job inside `foreachBatch`, which Spark plans adaptively unless told otherwise,
while Spark's own streaming queries run without AQE. On one local Spark (2 cores), over the same
cached batch of NEXMark-shaped bids, each round runs the epoch's job of NEXMark Q7 and Q5 (parse,
late filter, routing, the combine after the routing's shuffle, a `mapInArrow` task that reads its
rows: bench.route_combine's `one shuffle`) once with `spark.sql.adaptive.enabled` on (Spark's
default) and once with the job's epoch settings (spark_jobs.session.EPOCH_CONF: off), in
alternating order (ABBA). Each run builds the plan and runs it, as an epoch does. Prints each
variant's median over the rounds after the first two (the JIT's warm-up) and the ratio epoch ÷
adaptive, per query and batch size: the full profile's 20 000-bid batch, and a small one where an
epoch's fixed cost dominates (the latency experiment's epochs hold 1 000-5 000 rows).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from bench.parse_width import bid_rows
from bench.route_combine import plan

VARIANTS = ("adaptive", "epoch")
WARM_ROUNDS = 2  # rounds not counted: the JIT still compiles the plan's code


def _run(spark: Any, src: Any, query: type, variant: str) -> float:
    """One epoch's job, plan and run, in `variant`; wall seconds."""
    from spark_jobs.session import EPOCH_CONF, for_epochs

    if variant == "epoch":
        for_epochs(spark)
    else:
        for k in EPOCH_CONF:
            spark.conf.unset(k)  # Spark's default
    t0 = time.perf_counter()
    plan(src, query, "one shuffle").write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.adaptive", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[20_000, 2_000], help="bids per epoch, one size each")
    ap.add_argument("--rounds", type=int, default=16)
    a = ap.parse_args(argv)
    if a.rounds <= WARM_ROUNDS:
        ap.error(f"--rounds must be more than the {WARM_ROUNDS} warm-up rounds")
    from spark_jobs.nexmark.windows import Q5, Q7

    for rows in a.rows:
        spark, src = bid_rows("bench.adaptive", rows)
        print(f"{rows} bid records, {a.rounds} rounds (the first {WARM_ROUNDS} not counted), medians", flush=True)
        for name, q in (("q7", Q7), ("q5", Q5)):
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for i in range(a.rounds):
                for v in (VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))):
                    times[v].append(_run(spark, src, q, v))
            med = {v: statistics.median(ts[WARM_ROUNDS:]) for v, ts in times.items()}
            on, off = med["adaptive"], med["epoch"]
            print(f"{name} {rows:6d} rows  adaptive {on * 1000:6.0f} ms  epoch {off * 1000:6.0f} ms"
                  f"  epoch / adaptive {off / on:.3f}", flush=True)
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
