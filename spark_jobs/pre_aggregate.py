"""A pre-aggregating query's combine (`QuerySpec.pre_aggregate`), in Spark's JVM, in two halves
around the epoch's routing shuffle.

`mark`, before the shuffle: each record's verdict (late and far-ahead records become dead letters,
read from the epoch's clock: the driver's, the same on a replay) and its key, so that the routing
hashes each record as it would hash the record's group. `combine`, after the shuffle, inside each
worker's partition: the rows that agree on the worker and `group_by` become one row.

Why after the shuffle and not before it (Spark's map-side combine): a combine before the routing needs
a shuffle of its own, by the groups, and then the routing's shuffle by worker, two stages per epoch
where Spark's own query has one. Grouped by the worker too, the combine finds its rows already
clustered by the routing (`repartitionById` satisfies a clustering that holds the worker), so Spark
plans no second exchange. What the one shuffle carries is the records' columns instead of the
groups': the same for Q7, whose `collect_list` keeps every record anyway, and a few columns per
record otherwise. The raw value travels only with a rejected record (its dead letter)."""

from __future__ import annotations

from typing import Any

from spark_jobs.processor import QuerySpec
from spark_jobs.records import AHEAD, LATE, REJECT_COLUMN
from spark_jobs.sql_steps import aggregate, select
from spark_jobs.sql_text import ident, json_of, text

#: the routing's columns over `mark`'s rows (spark_jobs.routing.route), internal names beside the
#: query's own columns; the combine groups by them (each is a function of the key) and keeps them
KEY, WORKER, HASH, BIN = "__key", "__worker", "__h", "__bin"
#: a record's own group when it is rejected (null for a good record): its (partition, offset)
BAD = "CASE WHEN __reject IS NOT NULL THEN struct(__p, __o) END"
#: the combine's grouping columns as Spark keeps them in its result (`__g0`, `__g1`, ...)
GROUP_PREFIX = "__g"


def key_sql(spec: QuerySpec) -> str:
    """A good record's key, the JSON of its grouping keys: the same text before and after the combine."""
    return json_of((g, ident(g)) for g in spec.grouping_keys)


def mark(rows: Any, spec: QuerySpec, ts_columns: tuple[str, ...], clock: Any) -> Any:
    """`rows` (parsed: spark_jobs.query_input) with `__reject` now also saying late or ahead (when
    `clock`, an EpochClock, is given; None: the warm-up), `KEY` (null for a rejected record) and
    `__raw` kept for rejected records only. One DataFrame step, as SQL text: the driver analyses
    each step again every epoch, and each Column built in Python would be a Py4J round trip (the
    verdict is spelled three times instead: evaluating it costs the rows less than a second step
    costs the driver)."""
    why = "__reject"
    if spec.time_mode == "EventTime" and clock is not None:
        et_col = spec.event_time_column
        assert et_col is not None  # QuerySpec: EventTime needs one
        et = f"unix_millis({ident(et_col)})" if et_col in ts_columns else f"CAST({ident(et_col)} AS BIGINT)"
        if spec.max_ahead_ms is not None:
            ahead_ms = int(clock.processing_ms) + int(spec.max_ahead_ms)
            why = f"CASE WHEN {why} IS NULL AND {et} > {ahead_ms} THEN {text(AHEAD)} ELSE {why} END"
        why = (f"CASE WHEN __reject IS NULL AND {et} < {int(clock.watermark_ms)} THEN {text(LATE)} "
               f"ELSE {why} END")
    return select(rows, ["* EXCEPT (__reject, __raw)", f"{why} AS __reject",
                         f"IF(({why}) IS NULL, NULL, __raw) AS __raw",
                         f"IF(({why}) IS NULL, {key_sql(spec)}, NULL) AS {KEY}"])


def combine(marked: Any, spec: QuerySpec, ts_columns: tuple[str, ...], routed: bool) -> Any:
    """`mark`'s rows combined per group: (key, value, partition, offset, reject) and, when `routed`
    (the rows carry the routing's columns), h, bin and worker, grouped by the worker as well.

    One aggregation for both kinds of row, so the batch is read and parsed once (a union of a good and
    a rejected branch reads it twice): a rejected record is a group of its own, keyed by its
    (partition, offset), and carries its raw value and reason; good rows group as declared. A group's
    partition and offset are its first record's, which orders a key's groups as its records were.

    One Dataset, whose Columns are made once (spark_jobs.sql_steps.aggregate): the outputs are
    written over the grouping expressions and aggregates themselves, not over a second step's
    names. Spark keeps the grouping columns too, first, under internal names (GROUP_PREFIX): the
    task reads its columns by name and ignores them."""
    pre = spec.pre_aggregate
    assert pre is not None
    exprs = [*((g, ident(g)) for g in pre.group_by), *pre.aggregates]  # PreAggregate.columns, as expressions
    value = json_of((n, f"unix_millis({e})" if n in ts_columns else e) for n, e in exprs)
    own = [*((WORKER, HASH, BIN) if routed else ()), *pre.group_by]
    by = [f"{ident(g)} AS {ident(GROUP_PREFIX + str(i))}" for i, g in enumerate(own)]
    good = f"({BAD}) IS NULL"
    return aggregate(marked, [*by, f"{BAD} AS __bad"], [
        f"CASE WHEN {good} THEN {key_sql(spec)} END AS key",
        f"CASE WHEN {good} THEN {value} ELSE first(__raw, true) END AS value",
        "min(struct(__p, __o)).__p AS partition", "min(struct(__p, __o)).__o AS offset",
        f"first(__reject, true) AS {ident(REJECT_COLUMN)}",
        *([f"{HASH} AS h", f"{BIN} AS bin", f"{WORKER} AS worker"] if routed else [])])
