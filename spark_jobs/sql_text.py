"""Spark SQL text built from names and values. The driver builds an epoch's per-epoch expressions
as SQL text because each Column built in Python is a Py4J round trip (spark_jobs.processing); a name
or a string that reaches that text is quoted here, so any column name is one identifier and no
value is read as SQL."""

from __future__ import annotations

from collections.abc import Iterable


def ident(name: str) -> str:
    """A column name as a Spark SQL identifier (backquoted, so any name is one)."""
    return "`" + name.replace("`", "``") + "`"


def text(value: str) -> str:
    """A string as a Spark SQL literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def json_of(fields: Iterable[tuple[str, str]]) -> str:
    """The JSON (as binary) of named fields, each a (name, Spark SQL expression) pair."""
    return "CAST(to_json(named_struct(" + ", ".join(f"{text(n)}, {e}" for n, e in fields) + ")) AS BINARY)"


def int_array(values: Iterable[int], kind: str = "INT") -> str:
    """Integers as one Spark SQL array constant, `CAST(split('1,-2,...', ',') AS ARRAY<kind>)`: the
    optimizer folds it into a single literal that generated code references rather than inlines (an
    `array(1, -2, ...)` is one expression per element for the driver to analyse every epoch). Each
    value goes through int(), so no other text reaches the parser."""
    return "CAST(split('" + ",".join(str(int(v)) for v in values) + f"', ',') AS ARRAY<{kind}>)"
