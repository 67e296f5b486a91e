"""Stateless queries: a Ballast job whose every stage runs in Spark's JVM.

A query with no keyed operator (a filter, a projection, a format: NEXMark Q1 and Q2) has nothing
to fold and nothing to move, so no row needs to cross into Python. `StatelessQuery` declares its
stages as Spark SQL (`input_schema` parse, `where`, `columns`, the `output` projection and the
output `key`); the runner's epoch writes `StatelessOperator.rows(...)` with Ballast's Kafka writer
(spark_jobs.id_sink) in one Spark job. The job is still a Ballast job: the same epoch loop,
control topic, decisions, metrics, heartbeat, console, supervision, fencing and checkpoint
binding as any other.

Exactly once for consumers, as for every Ballast output: each record carries
`ballast-id = epoch:worker:seq`, here `epoch:<routed input partition>:<input offset>` (the writer
makes it from `__p`, `__o` and the epoch), so a replayed epoch re-emits the same records under the
same ids. One output row per input record at most (a generator such as `explode` in `columns`
would give two rows one id): refused at start. Records `parsed_rows` rejects (a tombstone, a
value that does not parse) and outputs over the record limit go to the dead-letter topic with the
same headers as a processor's (spark_jobs.records), from the JVM too (the writer adds them where
`__reason` is set).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ballast.errors import BallastError
from spark_jobs.operators import Operator, Output
from spark_jobs.processor import QuerySpec
from spark_jobs.query_input import INTERNAL, parsed_rows, timestamp_columns
from spark_jobs.records import (
    DETAILS,
    MAX_RECORD_BYTES,
    RECORD_OVERHEAD,
    TOO_LARGE,
)


class QueryRefused(BallastError, ValueError):
    """The query cannot run as declared; raised at the job's start, before any epoch."""


@dataclass(frozen=True)
class StatelessQuery:
    """A query with no state, all Spark SQL. `output`: the output row's columns, names or Spark SQL
    expressions (`price * 2 AS double_price`); the record's value is their JSON (timestamps as epoch
    milliseconds, nulls kept, as a processor's rows). `key`: columns whose JSON is the record's key
    (empty: no key, Kafka spreads the records). The rest is `QuerySpec`'s, with the same meaning."""

    output: tuple[str, ...]
    input_schema: str | None = None
    source_column: str | None = None
    where: str | None = None
    columns: tuple[tuple[str, str], ...] = ()
    key: tuple[str, ...] = field(default=())
    sources: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.output:
            raise ValueError("a stateless query needs at least one output column")

    def spec(self) -> QuerySpec:
        return QuerySpec(input_schema=self.input_schema, source_column=self.source_column, where=self.where,
                         columns=self.columns, sources=self.sources)


class StatelessOperator(Operator):
    """Runs a `StatelessQuery` in the runner's epoch (module docstring): no routing, no worker task."""

    name = "stateless"
    key_schema = "stateless"  # no store keys: the checkpoint binding records that there are none

    def __init__(self, query: StatelessQuery) -> None:
        self.query = query
        self._checked = False
        self._ts: tuple[str, ...] | None = None  # the parsed rows' timestamp columns: the same every epoch

    def sources(self) -> tuple[int, ...] | None:
        return self.query.sources

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        raise TypeError("a stateless query runs in Spark's JVM (StatelessOperator.rows), not through a fold")

    def rows(self, src: Any, topics: Sequence[str], ordered: bool = False) -> Any:
        """An epoch's rows for the writer (spark_jobs.id_sink.COLUMNS) plus `__dead` (1 for a dead
        letter, for a reader that counts), from the input rows (spark_jobs.inputs): `prepare` then
        `finish`, both in one plan (the runner applies `prepare` once, to the stream; spark_jobs.stream_plan)."""
        return self.finish(self.prepare(src, topics, ordered))

    def prepare(self, src: Any, topics: Sequence[str], ordered: bool = False) -> Any:
        """Everything of the query that does not depend on the epoch: parse, filter, project, the
        record's key and value, and a dead letter's reason, detail and source. Columns: key, value,
        `__p`, `__o` (the id's partition and offset), `__reason`, `__detail`, `__source`; no topic
        (the writer's options: a dead letter is a row with a `__reason`).
        `ordered`: the input went through a shuffle (a chain's hand-off dedup): bring each input
        partition back into one task, in offset order, so that one id series reaches each output
        partition in seq order."""
        from pyspark.sql import functions as F

        q = self.query
        rows = parsed_rows(src, q.spec())
        if self._ts is None:  # one schema read per query, not per epoch
            self._ts = timestamp_columns(f for f in rows.schema.fields if f.name not in INTERNAL)
        if self._ts:  # each DataFrame step is analysed again every epoch: none when there is nothing to convert
            rows = rows.withColumns({c: F.unix_millis(F.col(c)) for c in self._ts})
        json_opts = {"ignoreNullFields": "false"}
        value = F.to_json(F.struct(*[F.expr(c) for c in q.output]), json_opts).cast("binary")
        key = (F.to_json(F.struct(*[F.expr(k) for k in q.key]), json_opts).cast("binary") if q.key
               else F.lit(None).cast("binary"))
        rows = rows.select(value.alias("__value"), key.alias("__key"), "__p", "__o", "__raw", "__reject")
        if not self._checked:
            self._refuse_generators(rows)
        if ordered:
            rows = rows.repartition(F.col("__p")).sortWithinPartitions("__p", "__o")
        n = max(1, len(topics))
        topic = F.element_at(F.array(*[F.lit(t) for t in topics]), (F.col("__p") % n + 1).cast("int"))
        source = F.concat_ws(":", topic, (F.col("__p") / n).cast("long"), F.col("__o"))
        size = F.coalesce(F.length("__key"), F.lit(0)) + F.coalesce(F.length("__value"), F.lit(0))
        big = F.col("__reject").isNull() & (size > MAX_RECORD_BYTES - RECORD_OVERHEAD)
        reason = F.when(big, F.lit(TOO_LARGE)).otherwise(F.col("__reject"))
        detail = F.lit("")
        for r, text in DETAILS.items():
            detail = F.when(reason == r, F.lit(text)).otherwise(detail)
        detail = F.when(big, F.concat(F.lit("output of "), size.cast("string"), F.lit(
            f" bytes is over the job's {MAX_RECORD_BYTES}-byte record limit; its key and value were dropped "
            "(the source record is still in its topic)"))).otherwise(detail)
        dead = reason.isNotNull()
        return rows.select(
            F.when(dead, F.lit(None).cast("binary")).otherwise(F.col("__key")).alias("key"),
            F.when(big, F.lit(None).cast("binary")).when(dead, F.col("__raw")).otherwise(F.col("__value"))
            .alias("value"),
            "__p", "__o", reason.alias("__reason"), F.when(dead, detail).alias("__detail"),
            F.when(dead, source).alias("__source"))

    @staticmethod
    def finish(rows: Any, dead_column: bool = True) -> Any:
        """`prepare`'s rows as the epoch's writer takes them (spark_jobs.id_sink, which makes the
        headers), plus `__dead` if `dead_column` (the runner's epoch has none: no projection at all)."""
        return rows.selectExpr("*", "CAST(__reason IS NOT NULL AS INT) AS __dead") if dead_column else rows

    def _refuse_generators(self, rows: Any) -> None:
        """One output row per input record (the ids are the input's): a generator in `columns` is refused."""
        plan = rows._jdf.queryExecution().analyzed().toString()
        if any("Generate " in line for line in plan.splitlines()):
            raise QueryRefused("a stateless query may not make several rows of one record (a generator such as explode "
                             "in `columns`): each output's id is its input record's. Run it as a processor instead "
                             "(spark_jobs.processor), which numbers its outputs itself")
        self._checked = True
