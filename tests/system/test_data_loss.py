"""Kafka retention that deletes records the job has not read yet fails the job loudly (the default),
instead of skipping them silently; `--allow-data-loss` (fail_on_data_loss=False) accepts the gap."""

from __future__ import annotations

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from spark_jobs.offsets import committed_epochs
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dp_helpers import produce
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]


def test_records_deleted_before_the_job_read_them_fail_the_job(spark, kafka_bootstrap, make_topics, unique_name,
                                                               tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 1})
    produce(kafka_bootstrap, topic, [b"k%d" % i for i in range(100)], 1)

    def config(**kw: object) -> RunConfig:
        return RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                         db_url=db_url, bins=8, workers=1, trigger_ms=200, max_offsets_per_trigger=50, **kw)  # type: ignore[arg-type]

    runner = start_job(spark, config())
    try:
        wait_until(lambda: len(committed_epochs(tmp_path / "ckpt" / "spark")) >= 1, 240, "first epoch")
    finally:
        runner.stop()
    done = max(committed_epochs(tmp_path / "ckpt" / "spark"))
    # retention deletes everything up to offset 105: at most the first 100 were read, 100..104 are lost
    produce(kafka_bootstrap, topic, [b"late"] * 10, 1)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 105})
    finally:
        admin.close()
    runner = start_job(spark, config())
    try:
        wait_until(lambda: not runner.query.isActive, 240, "the query to fail on data loss")
        assert "data loss" in str(runner.query.exception()).lower() or "offset" in str(runner.query.exception())
    finally:
        runner.stop()
    assert max(committed_epochs(tmp_path / "ckpt" / "spark")) == done, "nothing was committed past the gap"
    # the operator may accept the gap explicitly
    runner = start_job(spark, config(fail_on_data_loss=False))
    try:
        wait_until(lambda: max(committed_epochs(tmp_path / "ckpt" / "spark")) > done, 240, "an epoch after the gap")
        assert runner.query.exception() is None
    finally:
        runner.stop()
