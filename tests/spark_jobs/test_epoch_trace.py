"""spark_jobs.epoch_trace: an epoch's driver phases and task spans become one trace whose critical
path runs through the task that finished last (an early task is never critical), through the
driver alone for an epoch without tasks; a trace the clocks make impossible is no trace, not an
error."""

from __future__ import annotations

import pytest

from spark_jobs.epoch_times import EpochTimes
from spark_jobs.epoch_trace import critical_path_text, epoch_participation, epoch_trace

pytestmark = pytest.mark.dataplane

DRIVER = [("control", 0, 5), ("decide", 5, 10), ("plan", 10, 20), ("spark", 20, 200), ("manifest", 200, 210),
          ("backlog", 210, 215), ("db", 215, 240), ("acks", 240, 250)]


def _doc(worker: int, read: tuple[int, int], fold_end: int) -> dict:
    return {"worker": worker, "spans": [["read", *read], ["prepare", read[1], read[1] + 5],
                                        ["fold", read[1] + 5, fold_end]]}


def test_the_task_that_finished_last_carries_the_critical_path():
    docs = [_doc(0, (40, 45), 90), _doc(1, (40, 48), 180), _doc(2, (41, 44), 70)]
    trace = epoch_trace(7, DRIVER, docs)
    kinds = {(a.timeline, a.kind) for a in trace.activities}
    assert ("driver", "job end") in kinds and ("driver", "spark") not in kinds and ("worker 1", "fold") in kinds
    assert {m.kind for m in trace.messages} == {"source stage", "task end"} and len(trace.messages) == 4
    cp = epoch_participation(7, DRIVER, docs)
    assert cp is not None and cp.paths == 1 and cp.length_us == 250
    both = cp.by("both")
    assert both["fold on worker 1"] == pytest.approx((180 - 53) / 250)
    assert both["source stage on driver -> worker 1"] == pytest.approx(20 / 250), "Spark's first stage + launch"
    assert not any(k.endswith(("worker 0", "worker 2")) for k in both), "they finished early and waited"
    assert critical_path_text(cp) == "fold on worker 1 51%, db on driver 10%, job end on driver 8%"


def test_an_epoch_without_tasks_is_the_drivers_alone():
    cp = epoch_participation(3, [("control", 0, 5), ("db", 5, 45), ("acks", 45, 50)], None)
    assert cp is not None and cp.bottleneck() == "db on driver holds 80% of the critical path"
    no_spans = epoch_participation(3, DRIVER, [{"worker": 0, "records_in": 0}])  # a stateless epoch's metrics
    assert no_spans is not None and no_spans.by("kind")["spark"] == pytest.approx(180 / 250)


def test_clocks_that_make_the_trace_impossible_give_no_trace():
    bad = [_doc(0, (40, 45), 90) | {"spans": [["read", 40, 60], ["fold", 50, 90]]}]  # overlapping spans
    assert epoch_participation(1, DRIVER, bad) is None


def test_epoch_times_records_each_laps_span_on_the_wall_clock():
    perf = iter([0.0, 0.010, 0.030])
    wall = iter([100.0, 100.010, 100.030])
    t = EpochTimes(clock=lambda: next(perf), wall=lambda: next(wall))
    t.lap("control")
    t.lap("db")
    assert t.spans == [("control", 100_000_000, 100_010_000), ("db", 100_010_000, 100_030_000)]
