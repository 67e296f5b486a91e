"""DataFrame steps from SQL text in as few calls into the driver's JVM as each step allows.

Why: an epoch's per-epoch steps are built on the driver in every epoch (spark_jobs.stream_plan), and
each call from Python into the JVM is a Py4J round trip. PySpark's `selectExpr(*exprs)` hands its
list to the JVM one element at a time (Py4J converts a Python list by one `add` call per element);
here the list crosses as one string, split in the JVM: three calls for any number of expressions.
Columns that never change (a pre-aggregation's grouping and outputs) are made once per SparkContext
and only applied in each epoch (`cached_columns`). Measured: `python -m bench.plan_build`
(docs/benchmarks.md, "The epoch's plan in fewer JVM calls")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: joins a list of SQL texts into one string for the JVM to split: the ASCII unit separator, which
#: no SQL text given here holds (refused if one does)
SEP = "\x1f"


def _classes(sc: Any) -> dict[str, Any]:
    """The JVM classes used here, looked up once per SparkContext (each lookup through Py4J's
    `jvm.a.b.C` is a round trip per package)."""
    made: dict[str, Any] = sc.__dict__.get("_ballast_sql_classes") or {}
    if not made:
        jvm = sc._jvm
        made = {"split": jvm.org.apache.commons.lang3.StringUtils, "seq": jvm.scala.collection.immutable.ArraySeq}
        sc.__dict__["_ballast_sql_classes"] = made  # gone with its context
    return made


def text_seq(sc: Any, texts: Sequence[str]) -> Any:
    """`texts` as one Scala `Seq[String]` in the JVM: two calls, whatever their number."""
    if not texts:
        raise ValueError("text_seq needs at least one text")
    bad = [t for t in texts if SEP in t or not t]
    if bad:
        raise ValueError(f"SQL texts must be non-empty and free of the separator {SEP!r}: {bad!r}")
    c = _classes(sc)
    return c["seq"].unsafeWrapArray(c["split"].splitByWholeSeparatorPreserveAllTokens(SEP.join(texts), SEP))


def select(df: Any, exprs: Sequence[str]) -> Any:
    """`df.selectExpr(*exprs)` in three calls into the JVM instead of one per expression and two more."""
    from pyspark.sql import DataFrame

    spark = df.sparkSession
    return DataFrame(df._jdf.selectExpr(text_seq(spark.sparkContext, exprs)), spark)


def cached_columns(sc: Any, exprs: Sequence[str]) -> tuple[Any, Any, Any]:
    """The JVM Columns of `exprs` (SQL text, `... AS name` allowed) as (the first, a Scala Seq of the
    rest, a Seq of all), made once per SparkContext and list of texts: a Column is an unresolved
    expression, the same in every epoch's plan."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.column import _to_seq

    made: dict[tuple[str, ...], tuple[Any, Any, Any]] = sc.__dict__.setdefault("_ballast_sql_columns", {})
    key = tuple(exprs)
    hit = made.get(key)
    if hit is None:
        if not key:
            raise ValueError("cached_columns needs at least one expression")
        cols = [F.expr(e)._jc for e in key]
        hit = made[key] = (cols[0], _to_seq(sc, cols[1:]), _to_seq(sc, cols))
    return hit


def aggregate(df: Any, by: Sequence[str], outputs: Sequence[str]) -> Any:
    """`df` grouped by the expressions `by`, with the columns `outputs`: one Dataset (one analysis on
    the driver) and two calls into the JVM once the Columns are made. Spark keeps the grouping
    columns in the result, first, under the names `by` gives them (`... AS name`); an output may
    use a grouping expression (written as in `by`, without its name) and any aggregate."""
    from pyspark.sql import DataFrame

    spark = df.sparkSession
    sc = spark.sparkContext
    by_all = cached_columns(sc, by)[2]
    out_first, out_rest, _ = cached_columns(sc, outputs)
    return DataFrame(df._jdf.groupBy(by_all).agg(out_first, out_rest), spark)
