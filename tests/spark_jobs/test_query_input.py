"""spark_jobs.query_input: the JVM half of a query's input. A good value becomes the schema's
columns; a tombstone and a value that does not parse are kept with their reason (they reach the
dead-letter topic instead of becoming rows of nulls), and `where` never drops them; `columns`
extend the row; the source partition and offset ride along."""

from __future__ import annotations

import pytest

from spark_jobs.processor import QuerySpec
from spark_jobs.query_input import INTERNAL, parsed_rows, timestamp_columns
from spark_jobs.records import DECODE_ERROR, NULL_VALUE

pytestmark = pytest.mark.dataplane


def test_parsed_rows_keep_rejects_with_their_reason_and_where_keeps_them(spark):
    df = spark.createDataFrame(
        [(b"a", b'{"user": "u1", "n": 5, "t": "2026-11-25T10:00:00Z"}', 0, 10),
         (b"b", b'{"user": "u2", "n": 1, "t": "2026-11-25T10:00:01Z"}', 1, 11),
         (b"c", b"{not json", 0, 12),
         (b"d", None, 1, 13)],
        "key binary, value binary, partition int, offset long")
    spec = QuerySpec(input_schema="user STRING, n INT, t TIMESTAMP", grouping_keys=("user",), where="n > 2",
                     columns=(("double_n", "n * 2"),))
    rows = parsed_rows(df, spec)
    got = {(r["__p"], r["__o"]): r for r in rows.collect()}
    assert sorted(got) == [(0, 10), (0, 12), (1, 13)], "where dropped n=1 and kept both rejects"
    good = got[(0, 10)]
    assert (good["user"], good["n"], good["double_n"], good["__reject"]) == ("u1", 5, 10, None)
    assert got[(0, 12)]["__reject"] == DECODE_ERROR and got[(0, 12)]["__raw"] == b"{not json"
    assert got[(1, 13)]["__reject"] == NULL_VALUE
    data = [f for f in rows.schema.fields if f.name not in INTERNAL]
    assert timestamp_columns(data) == ("t",) and [f.name for f in data] == ["user", "n", "t", "double_n"]
    # every row is parsed once: `where` and the reject test are not pushed below the parse with a
    # copy of `from_json` each (they were: three parses of every row before `where` alone)
    plan = rows._jdf.queryExecution().executedPlan().toString()
    assert plan.count("from_json(") == 1, plan


def test_without_a_schema_key_and_value_are_strings(spark):
    df = spark.createDataFrame([(b"k", b"v", 0, 1)], "key binary, value binary, partition int, offset long")
    (row,) = parsed_rows(df, QuerySpec()).collect()
    assert (row["key"], row["value"], row["__raw"], row["__reject"]) == ("k", "v", b"v", None)
