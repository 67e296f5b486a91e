"""A query's input in the JVM (the half every processor and stateless query shares): the Kafka
rows parsed with the query's `input_schema`, filtered by `where`, extended by `columns`, with the
bookkeeping columns that carry each row's source and why it is a dead letter. Applied once to the
streaming DataFrame (spark_jobs.stream_plan), never per row in Python."""

from __future__ import annotations

from typing import Any

from spark_jobs.processor import QuerySpec
from spark_jobs.records import DECODE_ERROR, NULL_VALUE

CORRUPT = "__corrupt"  # from_json's column for a value that does not parse


def _with_corrupt_column(schema: str) -> str:
    """The input schema (DDL `a INT, b STRING` or `struct<a:int,b:string>`) plus CORRUPT."""
    s = schema.strip()
    if s.lower().startswith("struct<") and s.endswith(">"):
        return f"{s[:-1]}, {CORRUPT}: string>"
    return f"{s}, {CORRUPT} STRING"


INTERNAL = ("__p", "__o", "__raw", "__reject", CORRUPT)  # parsed_rows' bookkeeping columns


def parsed_rows(df: Any, spec: QuerySpec) -> Any:
    """The JVM half every query shares: the input rows (spark_jobs.inputs) parsed with the query's
    `input_schema`, filtered by `where`, extended by `columns`. Beside the data columns: `__p`, `__o`
    (the routed partition and offset), `__raw` (the Kafka value) and `__reject` (why the row is a
    dead letter: a tombstone or a value that does not parse; null for a good row). A rejected row
    passes `where`, so that it reaches the dead-letter topic."""
    from pyspark.sql import functions as F

    extra = [F.col("__source").alias(spec.source_column)] if spec.source_column else []
    src = df.select(F.col("key"), F.col("value"), F.col("partition").alias("__p"), F.col("offset").alias("__o"),
                    *extra)
    tail = ["__p", "__o", *([spec.source_column] if spec.source_column else [])]
    if spec.input_schema:  # a value that does not parse is a dead letter, not a row of nulls
        parsed = F.from_json(F.col("value").cast("string"), _with_corrupt_column(spec.input_schema),
                             {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT})
        # parsed once per row, behind a barrier: over a plain projection Spark's optimizer pushes
        # `where`, the reject test and a late filter below it, inlining `from_json` into each (four
        # to five parses of every row). A non-deterministic column in the parse's projection, and an
        # always-true filter on it, stop that: no filter is pushed through a non-deterministic
        # projection. (A one-row generator stops it too, at 7–23 % more of a stateless query's JVM
        # cost: bench.parse_width, docs/benchmarks.md.) The column is never a shuffle's key.
        rows = src.select(parsed.alias("__r"), F.col("value").alias("__raw"), *[F.col(c) for c in tail],
                          F.rand(0).alias("__nd")).where("__nd >= 0")
        reject = (F.when(F.col("__raw").isNull(), F.lit(NULL_VALUE))
                  .when(F.col(f"__r.{CORRUPT}").isNotNull(), F.lit(DECODE_ERROR)))
        rows = rows.select("__r.*", "__raw", *tail, reject.alias("__reject"))
    else:
        rows = src.select(F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"),
                          F.col("value").alias("__raw"), *tail, F.lit(None).cast("string").alias("__reject"))
    if spec.where:
        rows = rows.where(F.col("__reject").isNotNull() | F.expr(spec.where))
    for name, expr in spec.columns:
        rows = rows.withColumn(name, F.expr(expr))
    return rows


def timestamp_columns(fields: Any) -> tuple[str, ...]:
    """The timestamp columns among `fields`: a row's JSON carries them as epoch milliseconds."""
    from pyspark.sql.types import TimestampNTZType, TimestampType

    return tuple(f.name for f in fields if isinstance(f.dataType, (TimestampType, TimestampNTZType)))
