"""The epoch's routing, driver side: the JVM expressions that send each keyed row to its bin's
worker (one Spark partition per worker) and run the worker's epoch over each partition
(spark_jobs.worker, by `mapInArrow`). Used by the epoch (spark_jobs.epoch_apply) and its warm-up."""

from __future__ import annotations

from typing import Any

from spark_jobs.output import output_type
from spark_jobs.records import EVENT_MS_COLUMN, REJECT_COLUMN
from spark_jobs.sql_steps import select


def route(keyed: Any, k: int, assignment: Any, tasks: int, fn: Any, handover: tuple[Any, ...] = (),
          rule: Any = None, combine: Any = None) -> Any:
    """The epoch's routing: hash, bin and worker columns, one partition per worker
    (`repartitionById`), `fn` over each by `mapInArrow`. Used by the epoch and by its warm-up.
    A bin in an open handover goes to both its owners (spark_jobs.handover.fan_out); with a `rule`
    (spark_jobs.handover.CopyRule) and the rows' event time, each copy only where its owner uses it.
    With `combine` (a pre-aggregating query: `keyed` is spark_jobs.pre_aggregate.mark's rows), each
    record is routed and `combine` groups each worker's partition after the one shuffle."""
    from spark_jobs.bins import routing_sql
    from spark_jobs.handover import copies_kept, fan_out

    if combine is not None:
        return _route_then_combine(keyed, k, assignment, tasks, fn, handover, combine)
    h, b, w = routing_sql("key", k, assignment)
    rejects = [REJECT_COLUMN] if REJECT_COLUMN in (names := keyed.columns) else []  # spark_jobs.records
    et = [EVENT_MS_COLUMN] if EVENT_MS_COLUMN in names else []
    cols = ["key", "value", "partition", "offset", *rejects, "h", "bin"]
    routed = select(keyed, [*cols[:-2], *et, f"{h} AS h", f"{b} AS bin", f"{w} AS worker"])
    if (fan := fan_out(handover, len(assignment))) is not None:
        routed = select(routed, [*cols, *et, f"{fan} AS (copy, worker)"])
        kept = copies_kept(handover, len(assignment), rule, EVENT_MS_COLUMN) if et and rule is not None else None
        if kept is not None:
            routed = (select(routed, ["*", *kept.columns]) if kept.columns else routed).where(kept.keep)
        routed = select(routed, [*cols, "worker"])
    elif et:
        routed = select(routed, [*cols, "worker"])
    return map_in_arrow(routed.repartitionById(tasks, "worker"), fn)


def _route_then_combine(marked: Any, k: int, assignment: Any, tasks: int, fn: Any, handover: tuple[Any, ...],
                        combine: Any) -> Any:
    """`route` for a pre-aggregating query: the routing's columns under internal names beside the
    query's own (spark_jobs.pre_aggregate), a handover's copies before the combine (each owner combines
    its own copy), no copy rule (the records carry no event-time column for it)."""
    from spark_jobs.bins import routing_sql
    from spark_jobs.handover import fan_out
    from spark_jobs.pre_aggregate import BIN, HASH, KEY, WORKER

    h, b, w = routing_sql(KEY, k, assignment)
    routed = select(marked, ["*", f"{h} AS {HASH}", f"{b} AS {BIN}", f"{w} AS {WORKER}"])
    if (fan := fan_out(handover, len(assignment), BIN, WORKER)) is not None:
        routed = select(routed, [f"* EXCEPT ({WORKER})", f"{fan} AS (__copy, {WORKER})"])
    return map_in_arrow(combine(routed.repartitionById(tasks, WORKER)), fn)


def map_in_arrow(df: Any, fn: Any) -> Any:
    """`df.mapInArrow(fn, output_type())`; for the epoch's own task (spark_jobs.worker.apply_task, the
    same function in every epoch) the Python UDF is made once per SparkContext, column list and set
    of shipped Python files, and only applied to each epoch's rows: PySpark's `mapInArrow` pickles
    and registers the function and resolves each column by a Py4J call, every time (~8 ms of a
    NEXMark Q7 epoch's plan, docs/benchmarks.md). Any module-level function marked `static_task` is
    made once the same way."""
    if not getattr(fn, "static_task", False):
        return df.mapInArrow(fn, output_type())
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.util import PythonEvalType

    sc = df.sparkSession.sparkContext
    made: dict[tuple[Any, ...], Any] = sc.__dict__.setdefault("_ballast_task_udfs", {})  # gone with its context
    cols = tuple(df.columns)
    # the UDF carries the files `addPyFile` had shipped when it was made (a live upgrade ships more)
    key = (fn.__module__, fn.__qualname__, cols, tuple(sc._python_includes or ()))
    jc = made.get(key)
    if jc is None:
        udf = pandas_udf(fn, returnType=output_type(),  # type: ignore[call-overload]  # as pyspark calls it
                         functionType=PythonEvalType.SQL_MAP_ARROW_ITER_UDF)
        jc = made[key] = udf(*[F.col(f"`{c}`") for c in cols])._jc
    return DataFrame(df._jdf.mapInArrow(jc, False, None), df.sparkSession)
