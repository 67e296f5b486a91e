"""Which JVM expressions the runner applies once, to the stream, and which per epoch (spark_jobs.stream_plan).
On a real local Spark: for every kind of operator (a stateless query, a processor, a
pre-aggregating processor, a fold operator), the stream plan plus the epoch's part give the
same rows as the whole plan built inside the epoch, and the epoch's part does not build the
operator's expressions again (building them per batch is what the split saves: bench.epoch_plan)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_jobs import pre_aggregate
from spark_jobs.inputs import InputRows
from spark_jobs.nexmark import windows
from spark_jobs.nexmark.q8 import Q8
from spark_jobs.nexmark.stateless import Q1
from spark_jobs.operators import WordCount
from spark_jobs.processing import ProcessorOperator
from spark_jobs.stateless import StatelessOperator
from spark_jobs.storage import Location
from spark_jobs.stream_plan import StreamPlan
from spark_jobs.timers import EpochClock

pytestmark = pytest.mark.dataplane
TOPICS = ["t.person", "t.auction", "t.bid"]


def _batch(spark: Any) -> Any:
    """A batch as the Kafka source hands it on: NEXMark events of the three topics, one of each
    kind per partition, a record that does not parse, and a control and a tick record (the stream
    must drop those: the driver reads the control records itself)."""
    person = b'{"id": %d, "name": "p", "date_time": %d}'
    auction = b'{"id": %d, "seller": %d, "category": 1, "date_time": %d, "expires": 99999}'
    bid = b'{"auction": %d, "bidder": 3, "price": %d, "date_time": %d}'
    rows = []
    for i in range(6):
        rows += [(None, person % (i, 1000 + i), "t.person", i % 2, i), (None, auction % (i, i, 1000 + i), "t.auction",
                                                                         i % 2, i),
                 (b"k", bid % (i % 3, 100 + i, 1000 + 10 * i), "t.bid", i % 2, i)]
    rows += [(None, b"{oops", "t.bid", 0, 6), (b"j", b'{"kind": "step"}', "j.control", 0, 0),
             (None, b"tick", "j.control.ticks", 0, 3)]
    return spark.createDataFrame(rows, "key binary, value binary, topic string, partition int, offset long")


def _rows(df: Any) -> list[tuple]:
    return sorted((tuple(r) for r in df.collect()), key=repr)


class _Counting(ProcessorOperator):
    """Counts how often the epoch-free expressions are built (what the stream saves per epoch)."""

    built = 0

    def prepare(self, df: Any) -> Any:
        type(self).built += 1
        return super().prepare(df)


@pytest.mark.parametrize("make", [lambda: StatelessOperator(Q1), lambda: ProcessorOperator(Q8),
                                  lambda: ProcessorOperator(windows.Q5), lambda: WordCount()],
                         ids=["stateless-q1", "processor-q8", "pre-aggregating-q5", "fold-wordcount"])
def test_the_stream_plan_plus_the_epoch_equal_the_plan_built_in_the_epoch(spark, tmp_path: Path, make) -> None:
    batch, clock = _batch(spark), EpochClock(7, 1_050, 0)
    once = StreamPlan(make(), InputRows(TOPICS, (), Location.of(str(tmp_path))), TOPICS)
    assert once.once
    rows = once.epoch(once.stream(batch), 7, clock, dead_column=True)
    if once.combine is not None:  # a pre-aggregating query's rows combine after the routing: here without it
        rows = pre_aggregate.combine(rows, once.op.spec, once.op.ts_columns, routed=False)
    got = _rows(rows)
    op = make()  # the whole plan in the epoch, as before the split
    src = InputRows(TOPICS, (), Location.of(str(tmp_path))).rows(batch, 7)
    if isinstance(op, StatelessOperator):
        want = _rows(op.rows(src, TOPICS))
    elif isinstance(op, ProcessorOperator):
        want = _rows(op.keyed(src, clock))
    else:
        want = _rows(op.keyed(src))
    assert got == want and got  # and the batch made rows (a vacuous pass is no pass)


def test_the_epoch_does_not_prepare_the_operator_again_unless_its_clock_is_needed(spark, tmp_path: Path) -> None:
    batch, inputs = _batch(spark), InputRows(TOPICS, (), Location.of(str(tmp_path)))
    plain = type("Q8Counting", (_Counting,), {"built": 0})
    plan = StreamPlan(plain(Q8), inputs, TOPICS)
    stream = plan.stream(batch)
    for epoch in range(3):
        plan.epoch(stream, epoch, EpochClock(epoch, 1_050, 0)).collect()
    assert plain.built == 1  # once, for the stream
    # a pre-aggregating query's late filter reads the epoch's clock: parsed once, keyed per epoch
    pre = type("Q5Counting", (_Counting,), {"built": 0})
    plan = StreamPlan(pre(windows.Q5), inputs, TOPICS)
    stream = plan.stream(batch)
    late = {e: plan.epoch(stream, e, EpochClock(e, 1_050, w)).where("__reject IS NOT NULL").count()
            for e, w in ((1, 0), (2, 1_030))}
    assert pre.built == 1 and late[1] < late[2]  # the clock of each epoch decides


def test_hand_off_inputs_build_every_stage_in_the_epoch(spark, tmp_path: Path) -> None:
    """A chain's hand-off input is deduplicated against the marks of the epochs before: per epoch."""
    inputs = InputRows(TOPICS, ("t.bid",), Location.of(str(tmp_path)))
    plan = StreamPlan(StatelessOperator(Q1), inputs, TOPICS)
    assert not plan.once
    batch = _batch(spark)
    assert plan.stream(batch) is batch
