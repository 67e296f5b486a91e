"""An epoch's time split into phases (spark_jobs.epoch_times): laps add up per phase in the order
they ran, and Spark's own durations outside the batch come from the query's last progress."""

from __future__ import annotations

from spark_jobs.epoch_times import EpochTimes, parse_log, spark_outside


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
    def __init__(self, progress: object, recent: list[object] | None = None) -> None:
        self.lastProgress = progress
        self.recentProgress = recent or ([progress] if progress else [])


def test_spark_outside_reads_the_last_progress_and_nothing_before_one() -> None:
    d = {"durationMs": {"addBatch": 900, "latestOffset": 5, "walCommit": 40, "queryPlanning": 20, "commitOffsets": 35,
                        "triggerExecution": 1000}}
    assert spark_outside(_Query(d)) == {"latestOffset": 5.0, "walCommit": 40.0, "queryPlanning": 20.0,
                                        "commitOffsets": 35.0}
    assert spark_outside(_Query(None)) == {} and spark_outside(None) == {}


def test_spark_outside_of_a_named_batch_looks_past_a_newer_last_progress() -> None:
    """An epoch's tail runs while Spark may already have reported that epoch: it asks for the batch
    before by id, and gets nothing rather than another batch's durations."""
    older = {"batchId": 6, "durationMs": {"latestOffset": 3, "queryPlanning": 11}}
    newer = {"batchId": 7, "durationMs": {"latestOffset": 9, "queryPlanning": 99}}
    q = _Query(newer, [older, newer])
    assert spark_outside(q, batch=6) == {"latestOffset": 3.0, "queryPlanning": 11.0}
    assert spark_outside(q, batch=7) == {"latestOffset": 9.0, "queryPlanning": 99.0}
    assert spark_outside(q, batch=5) == {}


def test_a_logged_line_reads_back_as_it_was_written() -> None:
    """parse_log is the reader of the runner's `epoch N time ms:` lines: the benchmarks' phase
    columns (latency, cluster, spike) were NaN for weeks because they parsed a format no longer logged."""
    now = iter([0.0, 0.002, 0.005, 0.045, 0.940, 0.955, 0.958, 0.978, 0.980])
    t = EpochTimes(clock=lambda: next(now))
    for phase in ("control", "decide", "plan", "spark", "manifest", "backlog", "db", "acks"):
        t.lap(phase)
    log = "\n".join([
        "2026-11-26 08:00:00 INFO ballast.runner: epoch 7: rows=100 W=2 B=64 map=v0 steps: -",
        f"2026-11-26 08:00:00 INFO ballast.runner: epoch 7 time ms: {t.text({'walCommit': 12.0})}",
        "2026-11-26 08:00:01 INFO ballast.runner: epoch 8 time ms: control 1, db 4, acks 0",
    ])
    got = parse_log(log)
    inside, outside = got[7]
    assert inside == {k: round(v) for k, v in t.ms.items()} and outside == {"walCommit": 12.0}
    assert inside["spark"] == 895 and inside["db"] == 20 and inside["acks"] == 2
    assert got[8] == ({"control": 1.0, "db": 4.0, "acks": 0.0}, {})
    assert parse_log("no such lines") == {}
