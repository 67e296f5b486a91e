"""A pre-aggregating query's combine in the JVM (spark_jobs.pre_aggregate, QuerySpec.pre_aggregate),
alone (`ProcessorOperator.keyed`) and after the epoch's routing (spark_jobs.routing.route)."""

from __future__ import annotations

import json

import pytest

from spark_jobs.output import kafka_arrow_schema

pytestmark = pytest.mark.dataplane


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
    from spark_jobs.routing import route
    from spark_jobs.storage import Location
    from spark_jobs.stream_plan import StreamPlan
    from spark_jobs.timers import EpochClock

    spark.conf.unset("spark.sql.adaptive.optimizer.excludedRules")  # as a fresh session has it
    batch = spark.createDataFrame([], "key binary, value binary, topic string, partition int, offset long, "
                                      "headers array<struct<key:string,value:binary>>")
    topics = ["p.person", "p.auction", "p.bid"]
    plan = StreamPlan(get_operator("spark_jobs.nexmark.windows:Q7"), InputRows(topics, (), Location.of(tmp_path)),
                      topics)
    keyed = plan.epoch(plan.stream(batch), 5, EpochClock(5, 2_000_000, 900_000))
    schema = kafka_arrow_schema()

    def task(batches):  # type: ignore[no-untyped-def]
        n = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_pylist([{"topic": "t", "key": None, "value": b"%d" % n, "headers": []}], schema)

    assert len(route(keyed, 3, (0, 1, 2, 0, 1, 2, 0, 1), 3, task, combine=plan.combine).collect()) == 3


def test_pre_aggregate_declarations_are_checked():
    from spark_jobs.processor import PreAggregate, QuerySpec

    with pytest.raises(ValueError, match="must hold the grouping keys"):
        QuerySpec(grouping_keys=("user",), pre_aggregate=PreAggregate(("day",), (("n", "count(*)"),)))
    with pytest.raises(ValueError, match="aggregate the event-time column 'ts'"):
        QuerySpec(grouping_keys=("user",), time_mode="EventTime", event_time_column="ts",
                  pre_aggregate=PreAggregate(("user",), (("n", "count(*)"),)))
    with pytest.raises(ValueError, match="at least one aggregate"):
        PreAggregate(("user",), ())


def _seen_by_worker(spark, values, handover=()):  # type: ignore[no-untyped-def]
    """Route `values` (bids of `_bids_query`) through the epoch's routing with a combine, each worker's task
    reporting (its partition, the key, value, partition, offset, reject, bin) of every row it got."""
    import pyarrow as pa

    from spark_jobs.processing import ProcessorOperator
    from spark_jobs.records import REJECT_COLUMN
    from spark_jobs.routing import route
    from spark_jobs.timers import EpochClock

    op = ProcessorOperator(_bids_query())
    marked = op.key(op.prepare(_df(spark, values)), EpochClock(3, 10_000, 0))
    schema = kafka_arrow_schema()

    def task(batches):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        for b in batches:
            rows = [{"topic": "t", "key": None, "headers": [], "value": json.dumps(
                [me, (r["key"] or b"").decode(), r["value"].decode(), r["partition"], r["offset"], r[REJECT_COLUMN],
                 r["bin"]]).encode()} for r in b.to_pylist()]
            yield pa.RecordBatch.from_pylist(rows, schema)

    routed = route(marked, 2, (0, 1, 1, 0), 2, task, handover, combine=op.combine)
    return routed, [tuple(json.loads(r["value"])) for r in routed.collect()], op


def test_the_routing_combines_each_workers_groups_after_its_one_shuffle(spark):
    """Routed per record and combined per worker after the routing's shuffle, the groups are the ones
    `keyed` makes without routing (same key, value, first record's partition and offset, the dead
    letter alone), each on its key's worker, and Spark plans one exchange for the epoch, not a
    shuffle for the combine and another for the routing."""
    from spark_jobs.bins import bin_of_hash
    from spark_jobs.records import REJECT_COLUMN
    from spark_jobs.timers import EpochClock

    values = [b'{"w": %d, "auction": %d, "t": %d}' % (w, a, t) for w, a, t in
              ((0, 1, 5), (1, 1, 9), (0, 1, 7), (2, 3, 1), (1, 1, 3), (0, 2, 4), (2, 3, 8))] + [b"{oops"]
    routed, seen, op = _seen_by_worker(spark, values)
    plan = routed._jdf.queryExecution().executedPlan().toString().split("== Initial Plan ==")[0]  # AQE's final
    assert plan.count("Exchange") == 1, plan
    alone = op.keyed(_df(spark, values), EpochClock(3, 10_000, 0)).collect()
    want = sorted(((r["key"] or b"").decode(), r["value"].decode(), r["partition"], r["offset"], r[REJECT_COLUMN])
                  for r in alone)
    assert sorted(s[1:6] for s in seen) == want and len(want) == 5  # 4 groups, 1 dead letter
    keys = spark.createDataFrame([(k.encode() or None,) for k in {s[1] for s in seen}], "k binary")
    hashes = {(r["k"] or b"").decode(): r["h"] for r in keys.selectExpr("k", "xxhash64(k) AS h").collect()}
    assignment = (0, 1, 1, 0)
    for worker, key, *_, b in seen:  # each on its bin's worker, as `route` without a combine sends a key
        assert b == bin_of_hash(hashes[key], 2) and worker == assignment[b], (worker, key, b)


def test_a_handed_over_bin_is_combined_on_both_owners(spark):
    """During a handover the bin's records reach both owners before the combine, so each combines
    the whole group (not a share of it) and the rest is routed as the map says."""
    from spark_jobs.handover import BinHandover

    values = [b'{"w": %d, "auction": 1, "t": %d}' % (w, t) for w, t in ((0, 5), (0, 9), (1, 7), (2, 3))]
    _, plain, _ = _seen_by_worker(spark, values)
    bins = {key: b for _, key, *_, b in plain}
    moved = bins['{"w":0}']
    handover = (BinHandover(moved, 0 if moved in (0, 3) else 1, 1 if moved in (0, 3) else 0, 3, 10_000, 10_000),)
    _, seen, _ = _seen_by_worker(spark, values, handover)
    copies = [s for s in seen if s[1] == '{"w":0}']
    assert sorted(c[0] for c in copies) == [0, 1] and {json.loads(c[2])["bids"] for c in copies} == {2}
    assert sorted(s[1:] for s in seen if s[1] != '{"w":0}') == sorted(s[1:] for s in plain if s[1] != '{"w":0}')
