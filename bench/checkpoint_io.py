"""What Spark's offset and commit logs cost between two epochs, by checkpoint file manager (issue 22, item 4):

    python -m bench.checkpoint_io [--batches 40] [--rounds 4] [--dir DIR]

Between two micro-batches Spark writes the offset log (`walCommit`) and the commit log
(`commitOffsets`) of the query's checkpoint, each a small file renamed into place. Its default
manager uses Hadoop's FileContext API, which on a Spark without Hadoop's native library (a pip
install) runs `readlink` and `chmod` as child processes of the driver's JVM for those writes; a job's
epochs use the FileSystem API's manager instead (spark_jobs.session.EPOCH_CONF). On one local Spark,
each round runs a query of `--batches` micro-batches (`rate-micro-batch`, 100 rows each, a
`foreachBatch` that does nothing, trigger 0) once per manager, in alternating order; a fresh
checkpoint under `--dir` (default: the system's temp dir) each time. Prints each manager's medians
of the two log writes and of the whole trigger (first 5 batches of each query not counted) and the
ratio epoch ÷ default. The same setting would speed up any Spark query's logs on such a machine:
what it shows is a cost Spark pays on this install, not one that Ballast's design avoids.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from typing import Any

VARIANTS = ("default", "epoch")
PHASES = ("walCommit", "commitOffsets", "triggerExecution")
SKIP = 5  # each query's first batches: the JVM's code for them is still cold


def _query(spark: Any, variant: str, batches: int, root: str) -> dict[str, list[float]]:
    """One query of `batches` micro-batches with `variant`'s manager: its per-batch phase times (ms)."""
    from spark_jobs.s3a import CHECKPOINT_MANAGER_KEY
    from spark_jobs.session import EPOCH_CONF

    if variant == "epoch":
        spark.conf.set(CHECKPOINT_MANAGER_KEY, EPOCH_CONF[CHECKPOINT_MANAGER_KEY])
    else:
        spark.conf.unset(CHECKPOINT_MANAGER_KEY)  # Spark's default
    ck = tempfile.mkdtemp(prefix=f"ckpt-{variant}-", dir=root)
    try:
        src = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 100).load()
        q = (src.writeStream.foreachBatch(lambda df, epoch: None).option("checkpointLocation", ck)
             .trigger(processingTime="0 seconds").start())
        try:
            while q.lastProgress is None or q.lastProgress["batchId"] < batches - 1:
                if q.exception() is not None:
                    raise RuntimeError(f"the {variant} query failed: {q.exception()}")
                q.awaitTermination(0.2)
        finally:
            q.stop()
        progress = [p for p in q.recentProgress if p["batchId"] >= SKIP]
        return {k: [float(p["durationMs"].get(k, 0)) for p in progress] for k in PHASES}
    finally:
        shutil.rmtree(ck, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.checkpoint_io", description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40, help="micro-batches per query")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--dir", default=None, help="where the checkpoints go (default: the system's temp dir)")
    a = ap.parse_args(argv)
    if a.batches <= SKIP + 1:
        ap.error(f"--batches must be more than {SKIP + 1} (the first {SKIP} are not counted)")
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench.checkpoint_io")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    root = a.dir or tempfile.gettempdir()
    times: dict[str, dict[str, list[float]]] = {v: {k: [] for k in PHASES} for v in VARIANTS}
    try:
        for i in range(a.rounds):
            for v in (VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS))):
                for k, ts in _query(spark, v, a.batches, root).items():
                    times[v][k].extend(ts)
    finally:
        spark.stop()
    print(f"{a.rounds} rounds of one query per manager, {a.batches} micro-batches each "
          f"(the first {SKIP} not counted), medians in ms")
    for k in PHASES:
        d, e = (statistics.median(times[v][k]) for v in VARIANTS)
        print(f"{k:<16} default {d:6.1f}  epoch {e:6.1f}  epoch / default {e / d if d else float('nan'):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
