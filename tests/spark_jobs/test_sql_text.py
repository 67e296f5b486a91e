"""spark_jobs.sql_text: names and strings quoted so that Spark reads them as one identifier, one
literal (the Spark-side check: tests/spark_jobs/test_processing.py, a pre-aggregate over awkward names)."""

from __future__ import annotations

from spark_jobs.sql_text import ident, json_of, text


def test_a_backquote_in_a_name_is_doubled_inside_backquotes():
    assert ident("the w") == "`the w`" and ident("it`s") == "`it``s`"


def test_a_quote_or_backslash_in_a_string_is_escaped():
    assert text("late") == "'late'" and text("it's") == "'it\\'s'" and text("a\\b") == "'a\\\\b'"


def test_json_of_names_each_field_with_a_literal():
    assert json_of([("a b", "`a b`"), ("n", "count(*)")]) == (
        "CAST(to_json(named_struct('a b', `a b`, 'n', count(*))) AS BINARY)")
