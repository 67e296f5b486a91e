"""A real job with one worker made slow on purpose (its operator sleeps on one key): every epoch
that carries the key logs a critical path whose largest activity is that worker's fold, and that
never names the other worker's fold (spark_jobs.epoch_trace, docs/tracing.md)."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from ballast.store.traces import read_trace
from spark_jobs.bins import bin_of_hash, bits_for, uniform_assignment
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]
HERE = Path(__file__).parent
BINS, WORKERS = 8, 2
LINE = re.compile(r"epoch (\d+) critical path (\d+) ms: (.*)")


def test_the_slow_workers_fold_leads_the_critical_path(spark, kafka_bootstrap, make_topics, unique_name, tmp_path,
                                                        db_url, produce_with_spark, caplog):
    spark.sparkContext.addPyFile(str(HERE / "slow_key_operator.py"))
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    keys = [b"slow" if i % 50 == 0 else b"k%d" % (i % 400) for i in range(3000)]
    produce_with_spark(topic, keys, [b"1"] * len(keys))
    [h] = spark.range(1).select(F.xxhash64(F.lit(b"slow")).alias("h")).first()  # the routing's own hash
    slow = uniform_assignment(BINS, WORKERS)[bin_of_hash(h, bits_for(BINS))]
    fast = 1 - slow
    cfg = RunConfig(job=job, operator="slow_key_operator:SlowKeyCount", input_topic=topic,
                    checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap, db_url=db_url, bins=BINS,
                    workers=WORKERS, trigger_ms=100, max_offsets_per_trigger=500)
    ckpt = cfg.checkpoint_dir + "/spark"
    with caplog.at_level(logging.INFO, "ballast.runner"):
        runner = start_job(spark, cfg)
        try:
            wait_until(lambda: (e := committed_epochs(ckpt)) and sum(
                read_end_offsets(ckpt, e[-1]).get(topic, {}).values()) == len(keys), 300, "all input consumed",
                check=lambda: runner.query.exception() is None or pytest.fail(str(runner.query.exception())))
        finally:
            runner.stop()
    lines = [m.groups() for r in caplog.records if (m := LINE.match(r.getMessage()))]
    stored = read_trace(db_url, job, cfg.operator)
    assert {a.epoch for a in stored.activities} == {int(e) for e, _, _ in lines[:-1]}, \
        "each epoch's trace is stored with the next epoch's commit (the last one's is not, yet)"
    slow_epochs = [(int(e), int(ms), text) for e, ms, text in lines if int(ms) >= 1000]
    print("\n".join(f"epoch {e} critical path {ms} ms: {text}" for e, ms, text in slow_epochs))
    assert len(slow_epochs) >= 3, f"too few epochs carried the slow key: {lines}"
    for epoch, ms, text in slow_epochs:
        # the largest activity (a message kind such as Spark's source stage may still lead on a loaded machine)
        activities = [part.rsplit(" ", 1)[0] for part in text.split(", ") if " on " in part]
        assert activities and activities[0] == f"fold on worker {slow}", f"epoch {epoch} ({ms} ms): {text}"
        assert f"fold on worker {fast} " not in text, f"epoch {epoch}: the fast worker finished early: {text}"
