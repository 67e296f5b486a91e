"""The runner under a newer driver token: a job that committed epochs, then finds that a newer
start of its operator took the token (a relaunch elsewhere), refuses its next epoch inside the
epoch — no manifest, no DB rows, no Spark commit — ends with `Fenced` naming both tokens, and
does not mark the newer driver's heartbeat stopped."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from ballast.store import JobStore, fencing
from ballast.store.traces import read_trace
from spark_jobs.durable import DurableState
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dp_helpers import produce, zipf_keys
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane]
BINS = 16


def test_an_epoch_after_a_newer_start_is_refused_whole(spark, kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                      db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    ckpt = tmp_path / "ckpt"
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(ckpt), bootstrap=kafka_bootstrap, db_url=db_url,
                    bins=BINS, workers=2, trigger_ms=100, trace=False)  # --no-trace: nothing stored (below)
    first = zipf_keys(800, 300, seed=3)
    produce(kafka_bootstrap, topic, first, partitions=2)
    spark_ckpt = ckpt / "spark"

    def consumed() -> int:
        eps = committed_epochs(spark_ckpt)
        return sum(read_end_offsets(spark_ckpt, eps[-1]).get(topic, {}).values()) if eps else 0

    runner = start_job(spark, cfg)

    def alive() -> None:
        assert runner.query.exception() is None, runner.query.exception()

    try:
        wait_until(lambda: consumed() == len(first), 180, "the first records committed", poll=0.2, check=alive)
        assert runner.fence is not None and runner.fence.token == 1
        done, last = committed_epochs(spark_ckpt), runner.last_epoch
        assert last is not None
        newer = fencing.take_token(db_url, job, "keycount", datetime.now(UTC))  # a relaunch elsewhere
        assert newer.token == 2
        produce(kafka_bootstrap, topic, zipf_keys(400, 200, seed=4), partitions=2)
        wait_until(lambda: not runner.query.isActive, 180, "the fenced query to end", poll=0.2)
        with pytest.raises(fencing.Fenced, match="holds driver token 1, but the metrics DB has token 2") as exc:
            runner.await_termination()
        assert runner.fencing.fenced is exc.value and f"the manifest of epoch {last + 1} was refused" in str(exc.value)
    finally:
        runner.stop()
    assert committed_epochs(spark_ckpt) == done, "Spark committed an epoch the DB refused"
    store = JobStore(db_url, job, "keycount")
    assert max(e.epoch for e in store.epoch_metrics()) == last
    assert DurableState(str(ckpt / "state"), job, BINS).last_epoch == last, "a manifest was written"
    hb = store.heartbeat()
    assert hb is not None and hb.status == "running" and hb.last_epoch == last  # not "stopped" by the stale one
    assert read_trace(db_url, job, "keycount").activities == (), "--no-trace stores no epoch trace"


def test_the_declared_outage_budget_counts_the_object_stores_only_when_the_state_is_on_one(monkeypatch, tmp_path):
    """The supervisor adds the driver's declared budget to its heartbeat timeout: a job whose state
    is on a file system does not wait for an object store, and must not be given its 300 s."""
    from spark_jobs.fencing import outage_budget

    monkeypatch.setenv("BALLAST_STORAGE_OUTAGE_S", "900")
    base = RunConfig(job="j", operator="keycount", input_topic="t", checkpoint_dir=str(tmp_path), bootstrap="b",
                     db_url="sqlite://", db_outage_s=40.0, kafka_outage_s=30.0)
    assert outage_budget(base) == 40.0
    on_s3 = dataclasses.replace(base, state_uri="s3://ballast/j/state")
    assert outage_budget(on_s3) == 900.0
