"""DataFrame steps in few JVM calls (spark_jobs.sql_steps): the same results as PySpark's own calls,
the Columns made once, and text that would split wrongly refused."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.dataplane


def _df(spark):  # type: ignore[no-untyped-def]
    return spark.createDataFrame([(1, "a", 10), (2, "b", 20), (1, "c", 30)], "g int, s string, n int")


def test_select_gives_what_select_expr_gives(spark):
    from spark_jobs.sql_steps import select

    exprs = ["*", "n * 2 AS twice", "concat(s, '|', CAST(g AS STRING)) AS `odd name`", "'a, b' AS comma"]
    got = select(_df(spark), exprs)
    want = _df(spark).selectExpr(*exprs)
    assert got.columns == want.columns == ["g", "s", "n", "twice", "odd name", "comma"]
    assert sorted(got.collect()) == sorted(want.collect())


def test_select_refuses_text_that_would_split_wrongly(spark):
    from spark_jobs.sql_steps import SEP, select

    with pytest.raises(ValueError, match="separator"):
        select(_df(spark), ["g", f"'x{SEP}y' AS s"])
    with pytest.raises(ValueError, match="non-empty"):
        select(_df(spark), ["g", ""])


def test_aggregate_keeps_the_grouping_columns_first_and_computes_the_outputs(spark):
    """Outputs over the grouping expression (as written in `by`, without its name) and aggregates."""
    from spark_jobs.sql_steps import aggregate

    got = aggregate(_df(spark), ["g AS __g0", "g % 2 = 1 AS odd"],
                    ["CASE WHEN g % 2 = 1 THEN sum(n) ELSE -1 END AS total", "min(struct(n, s)).s AS first_s"])
    assert got.columns == ["__g0", "odd", "total", "first_s"]
    assert sorted(tuple(r) for r in got.collect()) == [(1, True, 40, "a"), (2, False, -1, "b")]


def test_the_columns_are_made_once_per_context_and_list(spark):
    """A second epoch's aggregate with the same texts reuses the JVM Columns (no call per column)."""
    from spark_jobs.sql_steps import aggregate, cached_columns

    sc = spark.sparkContext
    by, outputs = ["g AS gg"], ["count(*) AS c"]
    first = cached_columns(sc, outputs)
    made = dict(sc.__dict__["_ballast_sql_columns"])
    assert [r.c for r in aggregate(_df(spark), by, outputs).orderBy("gg").collect()] == [2, 1]
    assert cached_columns(sc, outputs) is first
    assert set(sc.__dict__["_ballast_sql_columns"]) - set(made) == {tuple(by)}
