"""An epoch's time split into phases (spark_jobs.epoch_times): laps add up per phase in the order
they ran, and Spark's own durations outside the batch come from the query's last progress."""

from __future__ import annotations

from spark_jobs.epoch_times import EpochTimes, spark_outside


def test_laps_add_up_per_phase_in_order() -> None:
    now = iter([0.0, 0.020, 0.030, 0.045])  # the clock at start and at each lap, in seconds
    t = EpochTimes(clock=lambda: next(now))
    t.lap("plan")
    t.lap("spark")
    t.lap("plan")  # a phase that comes back adds to its first lap
    assert list(t.ms) == ["plan", "spark"]
    assert round(t.ms["plan"], 6) == 35.0 and round(t.ms["spark"], 6) == 10.0
    text = t.text({"walCommit": 12.0, "commitOffsets": 30.0})
    assert text == "plan 35, spark 10; Spark outside the batch before: walCommit 12, commitOffsets 30"
    assert EpochTimes(clock=lambda: 1.0).text() == ""  # no lap, no Spark progress: nothing to say


class _Query:
    def __init__(self, progress: object) -> None:
        self.lastProgress = progress


def test_spark_outside_reads_the_last_progress_and_nothing_before_one() -> None:
    d = {"durationMs": {"addBatch": 900, "latestOffset": 5, "walCommit": 40, "queryPlanning": 20, "commitOffsets": 35,
                        "triggerExecution": 1000}}
    assert spark_outside(_Query(d)) == {"latestOffset": 5.0, "walCommit": 40.0, "queryPlanning": 20.0,
                                        "commitOffsets": 35.0}
    assert spark_outside(_Query(None)) == {} and spark_outside(None) == {}
