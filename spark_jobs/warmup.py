"""Warm-up before the first batch: start the Python workers, import the job's modules and open
the caches, and run the epoch's Spark plan once on a synthetic row, so the first epoch after a
(re)start does not pay ~10 s for it; and where the caches live.

A mixin of `spark_jobs.runner.JobRunner`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from spark_jobs.durable import DurableState
from spark_jobs.journal import Journal
from spark_jobs.run_config import RunConfig

log = logging.getLogger("ballast.runner")


class WarmUp:
    """Python workers and caches ready before the first epoch."""

    cfg: RunConfig
    spark: Any
    journal: Journal
    durable: DurableState | None
    _cache_dir: str | None
    inputs: Any
    op: Any

    @property
    def k(self) -> int:  # the runner's: bits of the map in force
        raise NotImplementedError

    def _warm_up(self, workers: int) -> None:
        """Before the first batch: start the Python workers (imports of pyarrow, lmdb, the job's
        modules, the operator) and open the caches, so the first epoch after a (re)start does not
        pay ~10 s for it. A failure here is only logged: the first epoch then pays the cost."""
        t0 = time.perf_counter()
        fn = _warm_fn(self.cfg.path, self.cfg.job, self._cache_dir, self.durable.store_id if self.durable else "")
        try:
            self.spark.sparkContext.parallelize(range(workers), workers).mapPartitionsWithIndex(fn).collect()
            log.info("warmed %d Python workers and their caches in %.0f ms", workers, (time.perf_counter() - t0) * 1000)
        except Exception:
            log.warning("warm-up failed; the first epoch starts the Python workers itself", exc_info=True)

    def _warm_plan(self, source_schema: Any, workers: int) -> None:
        """Spark's own first job on a fresh JVM pays class loading and code generation (most of the
        cold first epoch's ~10 s is outside our Python task). Run the epoch's plan once before the
        query starts: the input filter, the operator's keying, the routing columns, the shuffle by
        worker and mapInArrow, over one synthetic row of the first input topic, into a function that
        applies nothing and a sink that writes nothing. Hand-off inputs are skipped (their
        deduplication reads the journal). A failure is only logged."""
        if getattr(self.inputs, "handoff", None):
            return
        from pyspark.sql import functions as F

        from spark_jobs.worker import route

        t0 = time.perf_counter()
        try:
            one = self.spark.range(0, 1, 1, 1)
            # not a literal: the optimizer would fold the input filter and drop the plan before codegen
            topic = F.when(F.col("id") < 0, F.lit("")).otherwise(F.lit(self.cfg.input_topics[0]))
            fill = {"topic": topic, "value": F.lit(b"{}"), "offset": F.col("id"), "partition": F.lit(0),
                    "timestamp": F.current_timestamp(), "timestampType": F.lit(0)}
            df = one.select(*[(fill[f.name] if f.name in fill else F.lit(None)).cast(f.dataType).alias(f.name)
                              for f in source_schema.fields])
            keyed = self.op.keyed(self.inputs.rows(df, -1))
            route(keyed, self.k, [0] * (1 << self.k), workers, _apply_nothing).write.format("noop").mode(
                "overwrite").save()
            log.info("warmed Spark's epoch plan (code generation, shuffle, Arrow) in %.0f ms",
                     (time.perf_counter() - t0) * 1000)
        except Exception:
            log.warning("Spark plan warm-up failed; the first epoch pays for code generation itself", exc_info=True)

    def _default_cache_dir(self) -> str | None:
        """`--cache-dir`, else: in local mode with a local checkpoint dir, `<checkpoint>/cache`, so a
        restart finds its caches warm (they are checked against the durable state before use); on
        a cluster None = each executor's own directory."""
        if self.cfg.cache_dir:
            return self.cfg.cache_dir
        master = str(self.spark.sparkContext.master)
        if master.startswith("local") and self.journal.root.is_local:
            return f"{self.journal.root.path}/cache"
        return None



def _warm_fn(operator: str, job: str, cache_dir: str | None, store_id: str) -> Any:
    def warm(index: int, _rows: Any) -> Any:
        import lmdb  # noqa: F401
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401

        from spark_jobs import worker  # noqa: F401
        from spark_jobs.cache import WorkerCache, default_cache_root
        from spark_jobs.operators import get_operator

        get_operator(operator)
        if store_id:
            WorkerCache(cache_dir or default_cache_root(job), store_id, job, index).close()
        yield index

    return warm


def _apply_nothing(batches: Any) -> Any:
    """The warm-up's mapInArrow function: reads its input, applies and emits nothing."""
    for _ in batches:
        pass
    return iter(())
