"""spark_jobs.streaming_query: the values a query runs with are the configuration's where no
settings step changed them, a step's 0 lifts the cap, and a step's values win over the command line;
the old query is stopped only once Spark reports the settings epoch committed (a stand-in query: the
moment between the batch's return and Spark's commit-log write cannot be held open on real Spark;
the restart itself, on real Spark and Kafka: tests/system/test_settings_job.py). Fast: no services."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from ballast.protocol import Settings
from spark_jobs.run_config import RunConfig
from spark_jobs.s3a import CHECKPOINT_MANAGER_KEY
from spark_jobs.storage import Location
from spark_jobs.streaming_query import Effective, StreamingQuery, await_commit

pytestmark = pytest.mark.dataplane


def _cfg(trigger_ms: int = 1000, cap: int | None = None) -> RunConfig:
    return RunConfig(job="j", input_topic="j.in", checkpoint_dir="/tmp/unused", bootstrap="127.0.0.1:1",
                     db_url="sqlite://", trigger_ms=trigger_ms, max_offsets_per_trigger=cap)


def test_without_settings_steps_the_command_line_holds() -> None:
    assert Effective.of(_cfg(500, 2000), Settings()) == Effective(500, 2000)
    assert Effective.of(_cfg(500, None), Settings()) == Effective(500, None)


def test_a_settings_steps_values_win_and_leave_the_others_alone() -> None:
    assert Effective.of(_cfg(500, 2000), Settings(trigger_ms=0)) == Effective(0, 2000), "0 ms: no wait"
    assert Effective.of(_cfg(500, 2000), Settings(max_records_per_epoch=300)) == Effective(500, 300)
    assert Effective.of(_cfg(500, 2000), Settings(max_records_per_epoch=0)) == Effective(500, None), "0: no cap"
    assert Effective.of(_cfg(500, None), Settings(250, 40)) == Effective(250, 40)


class _Query:
    """A query whose progress reports `batch` once `commit_at` (monotonic s) has passed."""

    def __init__(self, batch: int, commit_in_s: float, active: bool = True) -> None:
        self.batch, self.commit_at, self.isActive = batch, time.monotonic() + commit_in_s, active

    @property
    def lastProgress(self) -> dict[str, Any] | None:
        return {"batchId": self.batch} if time.monotonic() >= self.commit_at else {"batchId": self.batch - 1}


def test_the_old_query_is_stopped_only_once_spark_reports_the_settings_epoch_committed() -> None:
    q = _Query(7, commit_in_s=0.3)
    t0 = time.monotonic()
    await_commit(q, 7)
    assert time.monotonic() >= q.commit_at and time.monotonic() - t0 < 2, "returned on the commit, not before"
    t0 = time.monotonic()
    await_commit(_Query(8, commit_in_s=0.0), 7)  # a later batch reported: committed long ago
    assert time.monotonic() - t0 < 0.1


def test_a_query_that_ended_or_never_reports_does_not_hold_the_restart() -> None:
    ended = _Query(7, commit_in_s=60, active=False)  # the next batch refused to run: Spark had committed
    t0 = time.monotonic()
    await_commit(ended, 7)
    assert time.monotonic() - t0 < 0.1
    silent = _Query(7, commit_in_s=60)
    threading.Timer(0.2, lambda: setattr(silent, "isActive", False)).start()
    await_commit(silent, 7, timeout_s=5)
    t0 = time.monotonic()
    await_commit(_Query(7, commit_in_s=60), 7, timeout_s=0.2)
    assert time.monotonic() - t0 < 1, "bounded: it stops anyway after the timeout"


def test_the_epochs_run_without_adaptive_execution_as_sparks_own_streaming_queries_do(spark, tmp_path) -> None:
    """spark_jobs.session.EPOCH_CONF: a `foreachBatch` batch is planned adaptively by default; the
    query's epochs are not (an epoch's shuffle keeps its W partitions, no re-planning between stages)."""
    plans: list[str] = []
    ran = threading.Event()

    def batch(df: Any, epoch: int) -> None:
        plans.append(df.groupBy((df.value % 2).alias("k")).count()._jdf.queryExecution().executedPlan().nodeName())
        ran.set()

    before = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.unset("spark.sql.adaptive.enabled")  # Spark's default, whatever ran on this session before
    try:
        sq = StreamingQuery(spark, _cfg(), ["j.in"], "j.control", {}, lambda s: s, batch,
                            Location.of(str(tmp_path / "ck")), threading.Event(), threading.Event())
        query = sq.start(spark.readStream.format("rate").option("rowsPerSecond", 100).load(), Effective(100, None))
        try:
            assert ran.wait(60), "no epoch ran"
        finally:
            query.stop()
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", before)
    assert plans and "AdaptiveSparkPlan" not in plans, plans


def test_the_querys_offset_and_commit_logs_are_written_through_the_file_system_api(spark, tmp_path) -> None:
    """spark_jobs.session.EPOCH_CONF: Spark's default (FileContext) manager runs `readlink` and `chmod` as
    child processes for every log write on a Spark without Hadoop's native library; the query's logs go
    through the FileSystem API's manager instead, whatever the session had before."""
    key = CHECKPOINT_MANAGER_KEY
    before = spark.conf.get(key, None)
    spark.conf.unset(key)  # Spark's default
    try:
        sq = StreamingQuery(spark, _cfg(), ["j.in"], "j.control", {}, lambda s: s, lambda df, epoch: None,
                            Location.of(str(tmp_path / "ck")), threading.Event(), threading.Event())
        query = sq.start(spark.readStream.format("rate").option("rowsPerSecond", 100).load(), Effective(100, None))
        try:
            engine = query._jsq.streamingQuery()
            logs = (engine.offsetLog(), engine.commitLog())
            managers = {log.fileManager().getClass().getSimpleName() for log in logs}
        finally:
            query.stop()
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
    assert managers == {"FileSystemBasedCheckpointFileManager"}, managers
    assert (tmp_path / "ck").exists()
