"""spark_jobs.handover's routing of a handed-over bin: each copy of a row only where its owner uses
it (`copies_kept`), a staggered key's phase computed in the JVM (`key_phase_sql`), and the routed
event time a processor with windows carries (`event_ms`). The rule is checked against the Python
one the owners apply (`BinHandover.key_bounds`, spark_jobs.processing); the owners' outputs with
the rule on are checked end to end in tests/system/test_handover_job.py."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime

import pytest

from ballast.policy.handover import WindowSpec
from spark_jobs.handover import BinHandover, CopyRule, copies_kept, event_ms, fan_out, key_phase_sql
from spark_jobs.processor import QuerySpec
from spark_jobs.records import EVENT_MS_COLUMN, RowRejected, decode_row

pytestmark = pytest.mark.dataplane

BINS = 8
# bin 3: grid windows, old 0 -> new 1; bin 5: a session handover (its old owner keeps every row)
GRID = BinHandover(bin=3, src=0, dst=1, since=4, activation_ms=10_000, boundary_ms=15_000)
SESSION = BinHandover(bin=5, src=1, dst=0, since=4, activation_ms=12_000, boundary_ms=12_000, session_first_ms=9_000)


def python_keeps(h: BinHandover | None, copy: int, window: WindowSpec, rule: CopyRule, key: bytes,
                 et: int | None) -> bool:
    """Whether the routing must deliver `copy` (0: the old owner's, 1: the new owner's), from what
    spark_jobs.processing does with each row: the new owner skips every row before the key's first
    row time (and the late and far-ahead ones, itself); the old owner folds, or dead-letters as late
    or too far ahead, every row but one after its key's boundary (sessions: every row)."""
    if h is None:
        return copy == 0
    lo, hi = h.key_bounds(window, key)
    if copy == 1:
        return et is not None and et >= lo
    if et is None or h.session_first_ms is not None:
        return True
    too_far = rule.ahead_limit_ms is not None and et > rule.ahead_limit_ms
    return et < hi or et < rule.watermark_ms or too_far


@pytest.mark.parametrize("window", [WindowSpec(5_000), WindowSpec(6_000, 2_000, offset_ms=500),
                                    WindowSpec(5_000, staggered=True), WindowSpec(6_000, 2_000, staggered=True)],
                         ids=["tumbling", "sliding", "staggered-tumbling", "staggered-sliding"])
@pytest.mark.parametrize("rule_at", [(0, None), (14_000, 30_000)], ids=["no-limits", "watermark-and-ahead"])
def test_each_copy_is_kept_exactly_where_its_owner_uses_the_row(spark, window, rule_at):
    rule = CopyRule(window, rule_at[0], rule_at[1])
    keys = [json.dumps({"key": f"k{i}"}, separators=(",", ":")).encode() for i in range(12)]
    times = [None, 8_999, 9_000, 9_999, 10_000, 11_500, 14_999, 15_000, 16_000, 29_999, 30_001]
    rows = [(b, k, et) for b in (2, 3, 5) for k in keys for et in times]
    df = spark.createDataFrame(rows, f"bin int, key binary, {EVENT_MS_COLUMN} long").selectExpr(
        "*", "CAST(bin % 2 AS INT) AS worker")
    fanned = df.selectExpr("*", f"{fan_out([GRID, SESSION], BINS)} AS (copy, worker2)").drop("worker")
    kept = copies_kept([GRID, SESSION], BINS, rule, EVENT_MS_COLUMN)
    assert kept is not None and bool(kept.columns) == window.staggered
    got = {(r["bin"], bytes(r["key"]), r[EVENT_MS_COLUMN], r["copy"]): r["keep"]
           for r in fanned.selectExpr("*", *kept.columns).selectExpr("*", f"{kept.keep} AS keep").collect()}
    hs = {3: GRID, 5: SESSION}
    want = {(b, k, et, c): python_keeps(hs.get(b), c, window, rule, k, et)
            for b, k, et in rows for c in ((0, 1) if b in hs else (0,))}
    assert got == want
    assert sum(want.values()) < len(want), "the rule drops copies: otherwise this test shows nothing"


def test_no_rule_without_an_open_handover():
    rule = CopyRule(WindowSpec(5_000), 0, None)
    done = BinHandover(3, 0, 1, 4, 10_000, 15_000, completes=True)
    assert copies_kept([], BINS, rule, EVENT_MS_COLUMN) is None
    assert copies_kept([done], BINS, rule, EVENT_MS_COLUMN) is None


def test_the_jvm_phase_is_pythons_for_every_key_it_claims_and_null_for_the_rest(spark):
    window = WindowSpec(90_000, staggered=True)
    strings = ["k0001", "", "a:b", "x,y", "{}", "a\":", "sp ace", "~!#$%&'()*+-./;<=>?@[]^_`|", "é", "q\"",
               "back\\slash", "tab\there", "\u2603", "k" * 300]
    ints = [0, -1, 7, 2**40, -(2**62)]
    rows = [(s, i, b) for s, i, b in itertools.product(strings, ints[:2], (True, False))]
    rows += [(strings[0], i, True) for i in ints]
    df = spark.createDataFrame(rows, "s string, i long, b boolean")
    keyed = df.selectExpr("s", "i", "b", "CAST(to_json(named_struct('s', s)) AS BINARY) AS k1",
                          "CAST(to_json(named_struct('i', i, 's', s, 'b', b)) AS BINARY) AS k3",
                          "CAST(to_json(named_struct('d', CAST(i AS DOUBLE) + 0.5)) AS BINARY) AS kd")
    got = keyed.selectExpr("s", "i", "b", f"{key_phase_sql(window, 'k1')} AS p1",
                           f"{key_phase_sql(window, 'k3')} AS p3", f"{key_phase_sql(window, 'kd')} AS pd").collect()
    safe = {s for s in strings if all(0x20 <= ord(c) <= 0x7E and c not in "\"\\" for c in s)}
    for r in got:
        if r["s"] in safe:
            assert r["p1"] == window.phase_of((r["s"],)) and r["p3"] == window.phase_of((r["i"], r["s"], r["b"]))
        else:
            assert r["p1"] is None and r["p3"] is None, f"{r['s']!r}: Spark's JSON may differ from Python's"
        assert r["pd"] is None, "a double's JSON text may differ between Spark and Python"
    assert sum(r["p1"] is not None for r in got) >= len(got) // 2


def test_every_epochs_rule_compiles_to_the_same_code(spark):
    """The bounds and the epoch's clock are literals Spark references (as the fan-out's owners): a later
    epoch, or another handover, runs the code generated for the first one."""
    df = spark.range(0, 64).selectExpr("CAST(id AS INT) AS bin", "CAST(id % 2 AS INT) AS worker",
                                       "CAST(to_json(named_struct('key', CAST(id AS STRING))) AS BINARY) AS key",
                                       f"id * 1000 AS {EVENT_MS_COLUMN}")
    debug = spark._jvm.org.apache.spark.sql.execution.debug.package
    window = WindowSpec(5_000, staggered=True)

    def code(hs: list[BinHandover], rule: CopyRule) -> str:
        kept = copies_kept(hs, 64, rule, EVENT_MS_COLUMN)
        assert kept is not None
        q = df.selectExpr("*", f"{fan_out(hs, 64)} AS (copy, w2)").selectExpr("*", *kept.columns).where(kept.keep)
        text = debug.codegenString(q._jdf.queryExecution().executedPlan())
        return text[text.index("Generated code:"):]

    one = code([BinHandover(3, 1, 0, 4, 10_000, 14_999)], CopyRule(window, 1_000, None))
    two = code([BinHandover(5, 1, 0, 4, 20_000, 24_999), BinHandover(40, 0, 1, 4, 20_000, 24_999)],
               CopyRule(window, 9_000, 77_000))
    assert "split(" not in one and one == two


def test_a_windowed_processor_routes_the_event_time_its_workers_decode(spark):
    spec = QuerySpec(grouping_keys=("k",), time_mode="EventTime", event_time_column="t", window=WindowSpec(5_000))
    rows = spark.createDataFrame(
        [("a", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), None),
         ("b", datetime(2026, 1, 1, tzinfo=UTC), None, None),
         ("c", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC), "parse")],
        "k string, t timestamp, u timestamp, __reject string")
    from pyspark.sql import functions as F

    cols = [f for f in rows.schema.fields if f.name != "__reject"]
    ok = F.col("__reject").isNull()
    out = rows.select("k", *event_ms(spec, ("t", "u"), cols, ok)).collect()
    t_ms = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert [(r["k"], r[EVENT_MS_COLUMN]) for r in out] == [("a", t_ms), ("b", t_ms), ("c", None)]
    # far outside a Python datetime: the worker rejects the row, so the routing must not read its time
    far = rows.selectExpr("k", "t", "timestamp_millis(300000000000000) AS u", "__reject")
    got = far.select("k", *event_ms(spec, ("t", "u"), cols, ok)).collect()
    assert all(r[EVENT_MS_COLUMN] is None for r in got)
    with pytest.raises(RowRejected):
        decode_row(json.dumps({"t": t_ms, "u": 300000000000000}).encode(), ("t", "u"), "t")
    no_windows = QuerySpec(grouping_keys=("k",), time_mode="EventTime", event_time_column="t")
    assert event_ms(no_windows, ("t", "u"), cols, ok) == []
