"""The epoch's routing (spark_jobs.routing.route) on local Spark: every row reaches the task of its
bin's worker, with the hash and bin the worker stores it under; a bin in an open handover reaches
both owners. The pre-aggregating path (route, then combine) is tests/spark_jobs/test_pre_aggregate.py."""

from __future__ import annotations

import json

import pytest

from spark_jobs.output import kafka_arrow_schema

pytestmark = pytest.mark.dataplane

ASSIGNMENT = (0, 1, 1, 0)  # 4 bins (k = 2) over 2 workers


def _seen(spark, keys, handover=()):  # type: ignore[no-untyped-def]
    """(task partition, key, worker column, bin, h) of every row each task got."""
    import pyarrow as pa

    from spark_jobs.routing import route

    keyed = spark.createDataFrame([(k, b"v", 0, i) for i, k in enumerate(keys)],
                                  "key binary, value binary, partition int, offset long")
    schema = kafka_arrow_schema()

    def task(batches):  # type: ignore[no-untyped-def]
        from pyspark import TaskContext

        me = TaskContext.get().partitionId()
        for b in batches:
            yield pa.RecordBatch.from_pylist([{"topic": "t", "key": None, "headers": [], "value": json.dumps(
                [me, r["key"].decode(), r["worker"], r["bin"], r["h"]]).encode()} for r in b.to_pylist()], schema)

    return [tuple(json.loads(r["value"])) for r in route(keyed, 2, ASSIGNMENT, 2, task, handover).collect()]


def test_each_row_reaches_its_bins_worker(spark):
    from spark_jobs.bins import bin_of_hash

    keys = [b"k%d" % i for i in range(40)]
    seen = _seen(spark, keys)
    assert sorted(s[1] for s in seen) == sorted(k.decode() for k in keys)  # each once
    assert {s[3] for s in seen} == {0, 1, 2, 3}  # a test that reaches every bin
    for task, _, worker, b, h in seen:
        assert b == bin_of_hash(h, 2) and task == worker == ASSIGNMENT[b]


def test_a_bin_in_an_open_handover_reaches_both_owners(spark):
    from spark_jobs.handover import BinHandover

    keys = [b"k%d" % i for i in range(40)]
    plain = _seen(spark, keys)
    moved = plain[0][3]
    src = ASSIGNMENT[moved]
    seen = _seen(spark, keys, (BinHandover(moved, src, 1 - src, 3, 10_000, 10_000),))
    in_bin = [s for s in seen if s[3] == moved]
    assert sorted(s[0] for s in in_bin) == sorted([src, 1 - src] * (len(in_bin) // 2)) and in_bin
    assert all(s[0] == s[2] for s in seen)  # the worker column says which copy a task got
    assert sorted(s for s in seen if s[3] != moved) == sorted(s for s in plain if s[3] != moved)


def test_a_static_task_is_made_once_and_reads_its_epoch_from_the_task(spark):
    from spark_jobs.routing import map_in_arrow
    from tests.helpers.static_tasks import PROPERTY, told_task

    sc = spark.sparkContext
    got = []
    for epoch in (1, 2):
        df = spark.createDataFrame([(b"k%d" % i, epoch) for i in range(6)], "key binary, epoch int")
        sc.setLocalProperty(PROPERTY, f"epoch {epoch}")
        try:
            got.append(sorted((r["key"], r["value"]) for r in map_in_arrow(df.repartition(2), told_task).collect()))
        finally:
            sc.setLocalProperty(PROPERTY, None)
    assert got == [sorted((b"k%d" % i, f"epoch {e}".encode()) for i in range(6)) for e in (1, 2)]
    made = [k[:3] for k in sc.__dict__["_ballast_task_udfs"] if k[1] == "told_task"]
    assert made == [("tests.helpers.static_tasks", "told_task", ("key", "epoch"))]  # one UDF for both epochs
