"""An epoch's time split into phases (spark_jobs.epoch_times): laps add up per phase in the order
they ran, and Spark's own durations outside the batch come from the query's last progress."""

from __future__ import annotations

import time

from spark_jobs.epoch_times import EpochTimes, spark_outside


def test_laps_add_up_per_phase_in_order() -> None:
    t = EpochTimes()
    time.sleep(0.02)
    t.lap("plan")
    time.sleep(0.01)
    t.lap("spark")
    time.sleep(0.01)
    t.lap("plan")  # a phase that comes back adds to its first lap
    assert list(t.ms) == ["plan", "spark"] and t.ms["plan"] >= 30 and 10 <= t.ms["spark"] < t.ms["plan"]
    text = t.text({"walCommit": 12.0, "commitOffsets": 30.0})
    assert text.startswith("plan ")
    assert text.endswith("; Spark outside the batch before: walCommit 12, commitOffsets 30")


class _Query:
    def __init__(self, progress: object) -> None:
        self.lastProgress = progress


def test_spark_outside_reads_the_last_progress_and_nothing_before_one() -> None:
    d = {"durationMs": {"addBatch": 900, "latestOffset": 5, "walCommit": 40, "queryPlanning": 20, "commitOffsets": 35,
                        "triggerExecution": 1000}}
    assert spark_outside(_Query(d)) == {"latestOffset": 5.0, "walCommit": 40.0, "queryPlanning": 20.0,
                                        "commitOffsets": 35.0}
    assert spark_outside(_Query(None)) == {} and spark_outside(None) == {}
