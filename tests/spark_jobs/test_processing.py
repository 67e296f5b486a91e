"""What a processor's handlers see and emit does not depend on the machine (spark_jobs.processing):
timestamps are aware UTC datetimes under any TZ, sets in output rows are written sorted. The
end-to-end check, a replay under another TZ, is tests/system/test_replay_bytes.py."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime

import pytest

from spark_jobs.records import _json_default, encode_output, utc_datetime

pytestmark = pytest.mark.dataplane


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kolkata", "America/New_York", "Pacific/Chatham"])
def test_timestamps_are_utc_whatever_the_zone(tz, monkeypatch):
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        for ms, want in [(0, datetime(1970, 1, 1, tzinfo=UTC)),
                         (1_772_958_153_123, datetime(2026, 3, 8, 8, 22, 33, 123000, tzinfo=UTC)),
                         (-1, datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
                         (253_402_300_799_999, datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC))]:
            got = utc_datetime(ms)
            assert got == want and got.utcoffset().total_seconds() == 0 and str(got) == str(want)
            assert round(got.timestamp() * 1000) == ms  # the instant, not a wall clock in the host's zone
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_output_rows_are_the_same_bytes_in_any_process():
    """Two interpreters with different hash seeds and zones encode the same row identically."""
    code = ("from spark_jobs.records import encode_output; from spark_jobs.records import utc_datetime;"
            "import sys; sys.stdout.write(encode_output({'ts': utc_datetime(1772958153123), "
            "'tags': {'alpha', 'beta', 'gamma', 'delta', 'x1', 'x2', 'x3'}}).decode())")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": str(seed), "TZ": tz, "PATH": "/usr/bin:/bin",
                                "PYTHONPATH": ":".join(sys.path)}).stdout
            for seed, tz in [(1, "UTC"), (2, "Asia/Kolkata"), (3, "America/New_York"), (4, "Australia/Sydney")]}
    assert outs == {'{"ts":"2026-03-08 08:22:33.123000+00:00",'
                    '"tags":["alpha","beta","delta","gamma","x1","x2","x3"]}'}, outs
    assert _json_default(frozenset({3, 1, 2})) == [1, 2, 3]
    assert encode_output({"n": 1}) == b'{"n":1}'


# ---------------------------------------------------------------- pre-aggregation (QuerySpec.pre_aggregate) --
def _bids_query(**extra):  # type: ignore[no-untyped-def]
    from spark_jobs.processor import PreAggregate, StatefulProcessor, query

    return query(StatefulProcessor, input_schema="w long, auction long, t long", grouping_keys=("w",),
                 time_mode="EventTime", event_time_column="t", lateness_ms=0,
                 pre_aggregate=PreAggregate(group_by=("w", "auction"),
                                            aggregates=(("bids", "count(*)"), ("t", "max(t)"))), **extra)


def _df(spark, values):  # type: ignore[no-untyped-def]
    return spark.createDataFrame([(b"k", v, i % 2, i) for i, v in enumerate(values)],
                                 "key binary, value binary, partition int, offset long")


@pytest.mark.dataplane
def test_pre_aggregate_combines_an_epochs_rows_per_group_in_the_jvm(spark):
    """Seven bids in two groups become two rows (count, latest event time, the first record's
    partition and offset); a value that does not parse still reaches the dead letters, alone."""
    import json

    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.records import DECODE_ERROR, REJECT_COLUMN
    from spark_jobs.timers import EpochClock

    op = ProcessorOperator(_bids_query())
    values = [b'{"w": 0, "auction": 1, "t": %d}' % t for t in (5, 9, 7, 1, 3)]
    values += [b'{"w": 0, "auction": 2, "t": 4}', b"{oops", b'{"w": 0, "auction": 2, "t": 8}']
    got = op.keyed(_df(spark, values), EpochClock(3, 10_000, 0)).collect()
    rows = sorted(((json.loads(r["value"]) | {"p": r["partition"], "o": r["offset"]}) for r in got
                   if r[REJECT_COLUMN] is None), key=lambda d: d["auction"])
    assert rows == [{"w": 0, "auction": 1, "bids": 5, "t": 9, "p": 0, "o": 0},
                    {"w": 0, "auction": 2, "bids": 2, "t": 8, "p": 1, "o": 5}]
    assert all(json.loads(r["key"]) == {"w": 0} for r in got if r[REJECT_COLUMN] is None)
    bad = [r for r in got if r[REJECT_COLUMN] is not None]
    assert [(r[REJECT_COLUMN], r["value"], r["offset"], r["key"]) for r in bad] == [(DECODE_ERROR, b"{oops", 6, None)]


@pytest.mark.dataplane
def test_pre_aggregate_dead_letters_late_and_far_ahead_records_before_combining(spark):
    """The epoch's watermark and processing time decide in the JVM, before a late record could hide
    in a group whose latest event time is not late."""
    import json

    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.records import AHEAD, LATE, REJECT_COLUMN
    from spark_jobs.timers import EpochClock

    op = ProcessorOperator(_bids_query(max_ahead_ms=1_000))
    values = [b'{"w": 0, "auction": 1, "t": %d}' % t for t in (100, 250, 400, 5_000)]
    got = op.keyed(_df(spark, values), EpochClock(1, 3_000, 200)).collect()
    reasons = {r["offset"]: r[REJECT_COLUMN] for r in got if r[REJECT_COLUMN] is not None}
    assert reasons == {0: LATE, 3: AHEAD}
    (good,) = [json.loads(r["value"]) for r in got if r[REJECT_COLUMN] is None]
    assert good == {"w": 0, "auction": 1, "bids": 2, "t": 400}


@pytest.mark.dataplane
def test_pre_aggregate_takes_any_column_name_and_a_timestamp_event_time(spark):
    """The epoch's pre-aggregation is built as SQL text: a column name with a space or a backquote
    is still one column, and a timestamp event time is compared and written as epoch ms."""
    import json

    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.processor import PreAggregate, StatefulProcessor, query
    from spark_jobs.records import LATE, REJECT_COLUMN
    from spark_jobs.timers import EpochClock

    q = query(StatefulProcessor, input_schema="`the w` long, `it``s` string, t timestamp", grouping_keys=("the w",),
              time_mode="EventTime", event_time_column="t", lateness_ms=0,
              pre_aggregate=PreAggregate(group_by=("the w", "it`s"), aggregates=(("n", "count(*)"), ("t", "max(t)"))))
    values = [b'{"the w": 1, "it`s": "a\'b", "t": "1970-01-01T00:00:0%dZ"}' % s for s in (2, 3, 1)]
    got = ProcessorOperator(q).keyed(_df(spark, values), EpochClock(1, 10_000, 1_500)).collect()
    assert {r["offset"]: r[REJECT_COLUMN] for r in got if r[REJECT_COLUMN] is not None} == {2: LATE}
    (good,) = [r for r in got if r[REJECT_COLUMN] is None]
    assert json.loads(good["key"]) == {"the w": 1}
    assert json.loads(good["value"]) == {"the w": 1, "it`s": "a'b", "n": 2, "t": 3000}


@pytest.mark.dataplane
def test_a_pre_aggregating_epoch_reads_and_parses_its_input_once(spark):
    """Rejected rows travel in the same aggregation as the good ones (no second branch that reads
    the batch again), and the JSON parse is not copied into the pushed-down filters (`where`, the
    reject test, the late filter): one scan, one `from_json` in the executed plan (issue 22)."""
    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.timers import EpochClock

    op = ProcessorOperator(_bids_query(max_ahead_ms=1_000))
    df = op.keyed(_df(spark, [b'{"w": 0, "auction": 1, "t": 5}', b"{oops"]), EpochClock(1, 3_000, 2))
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert plan.count("Scan") == 1 and plan.count("from_json(") == 1, plan
    assert len(df.collect()) == 2


@pytest.mark.dataplane
def test_an_empty_pre_aggregated_epoch_still_runs_every_workers_task(spark, tmp_path):
    """An epoch with no rows (a control-only epoch, a batch of other topics) still runs the W
    routing tasks: each worker must write its changelog object for the commit (AQE would otherwise
    propagate the empty aggregation through the routing and run none). NEXMark Q7's plan, as the
    runner builds it (spark_jobs.stream_plan)."""
    import pyarrow as pa

    from spark_jobs.inputs import InputRows
    from spark_jobs.operator_loader import get_operator
    from spark_jobs.storage import Location
    from spark_jobs.stream_plan import StreamPlan
    from spark_jobs.timers import EpochClock
    from spark_jobs.worker import route

    spark.conf.unset("spark.sql.adaptive.optimizer.excludedRules")  # as a fresh session has it
    batch = spark.createDataFrame([], "key binary, value binary, topic string, partition int, offset long, "
                                      "headers array<struct<key:string,value:binary>>")
    topics = ["p.person", "p.auction", "p.bid"]
    plan = StreamPlan(get_operator("spark_jobs.nexmark.windows:Q7"), InputRows(topics, (), Location.of(tmp_path)),
                      topics, "p.out", "p.dlq")
    keyed = plan.epoch(plan.stream(batch), 5, EpochClock(5, 2_000_000, 900_000))
    schema = pa.schema([("topic", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
                        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))])

    def task(batches):  # type: ignore[no-untyped-def]
        n = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pylist([{"topic": "t", "key": None, "value": b"%d" % n, "headers": []}], schema)

    assert len(route(keyed, 3, (0, 1, 2, 0, 1, 2, 0, 1), 3, task).collect()) == 3


def test_pre_aggregate_declarations_are_checked():
    from spark_jobs.processor import PreAggregate, QuerySpec

    with pytest.raises(ValueError, match="must hold the grouping keys"):
        QuerySpec(grouping_keys=("user",), pre_aggregate=PreAggregate(("day",), (("n", "count(*)"),)))
    with pytest.raises(ValueError, match="aggregate the event-time column 'ts'"):
        QuerySpec(grouping_keys=("user",), time_mode="EventTime", event_time_column="ts",
                  pre_aggregate=PreAggregate(("user",), (("n", "count(*)"),)))
    with pytest.raises(ValueError, match="at least one aggregate"):
        PreAggregate(("user",), ())
