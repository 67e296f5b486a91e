"""Processing-time timers and TTL in a running job: the reminders fire with no further input (the
job ticks itself when a timer comes due), each once, and the expired values and fired timers leave
no state behind."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ballast.topics import create_missing_topics
from spark_jobs.durable import read_state
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dp_helpers import produce
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent


def test_processing_time_timers_fire_without_input_and_ttl_cleans_up(spark, kafka_bootstrap, unique_name, tmp_path,
                                                                      db_url):
    job, topic = unique_name, f"{unique_name}.in"
    create_missing_topics(kafka_bootstrap, {topic: 2})
    keys = [b"k%02d" % (i % 20) for i in range(200)]
    produce(kafka_bootstrap, topic, keys, 2, [b"v%d" % i for i in range(200)])
    spark.sparkContext.addPyFile(str(HERE / "reminder_processor.py"))
    sys.path.insert(0, str(HERE))
    cfg = RunConfig(job=job, operator="reminder_processor:Reminder", input_topic=topic,
                    checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap, db_url=db_url, bins=8,
                    workers=2, trigger_ms=200)
    runner = start_job(spark, cfg)

    def outs() -> list[dict]:
        return sorted((json.loads(o.value) for o in read_output(kafka_bootstrap, f"{job}.output")[0]),
                      key=lambda d: d["key"])
    try:
        wait_until(lambda: len(outs()) >= 20, 240, "a reminder per key, without further input")
        wait_until(lambda: not any(read_state(cfg.state_location).values()), 60, "expired state cleaned up")
        assert runner.query.exception() is None
    finally:
        runner.stop()
    assert outs() == [{"key": f"k{i:02d}", "count": 10, "seen": None} for i in range(20)]
