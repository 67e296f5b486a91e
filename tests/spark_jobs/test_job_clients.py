"""spark_jobs.job_clients' options for Spark's Kafka clients: any `--kafka-outage-s` gives timeouts
Kafka's clients accept (a budget under 30 s used to fail every epoch with a ConfigException)."""

from __future__ import annotations

import threading

import pytest

from spark_jobs.job_clients import (
    MIN_POLL_TIMEOUT_MS,
    SOURCE_FETCH_WAIT_MS,
    JobClients,
)
from spark_jobs.journal import Journal
from spark_jobs.run_config import RunConfig

LINGER_MS = 5  # Kafka 4's producer default; Spark's sink does not set it


@pytest.mark.parametrize("budget_s", [1.0, 15.0, 45.0, 300.0, 3600.0])
def test_every_outage_budget_gives_timeouts_kafkas_clients_accept(budget_s: float) -> None:
    cfg = RunConfig(job="j", input_topic="t", checkpoint_dir="/c", bootstrap="b", db_url="sqlite://",
                    kafka_outage_s=budget_s)
    clients = JobClients(cfg, Journal("/c"), ["t"], threading.Event())
    budget_ms = int(budget_s * 1000)
    for source in (True, False):
        opts = {k: int(v) for k, v in clients.spark_kafka_options(source).items() if v.isdigit()}
        request, api = opts["kafka.request.timeout.ms"], opts["kafka.default.api.timeout.ms"]
        assert api >= max(request, budget_ms) and request <= 30_000  # every call rides out the whole budget
        if source:  # ... and the offset lookup makes it once (Spark tries 3 times by default)
            assert opts["fetchOffset.numRetries"] == 1 and api <= max(budget_ms, 2_000)
            assert opts["kafkaConsumer.pollTimeoutMs"] == max(budget_ms, MIN_POLL_TIMEOUT_MS)
        else:
            assert opts["kafka.delivery.timeout.ms"] >= LINGER_MS + request
            assert opts["kafka.max.block.ms"] >= budget_ms and opts["kafka.delivery.timeout.ms"] >= budget_ms


def test_the_sources_consumers_do_not_wait_out_kafkas_default_fetch_wait() -> None:
    """The control record's task waited ~500 ms (Kafka's fetch.max.wait.ms) in every epoch that
    received a step (spark_jobs.job_clients.SOURCE_FETCH_WAIT_MS); the sink's options do not need it."""
    cfg = RunConfig(job="j", input_topic="t", checkpoint_dir="/c", bootstrap="b", db_url="sqlite://")
    clients = JobClients(cfg, Journal("/c"), ["t"], threading.Event())
    assert clients.spark_kafka_options(source=True)["kafka.fetch.max.wait.ms"] == str(SOURCE_FETCH_WAIT_MS)
    assert SOURCE_FETCH_WAIT_MS <= 50
    assert "kafka.fetch.max.wait.ms" not in clients.spark_kafka_options(source=False)


def test_record_batches_are_checksummed_in_c() -> None:
    """kafka-python computes each batch's CRC-32C with the `crc32c` package when it is installed, else in
    pure Python at a few MB/s (requirements.txt): the job's acks and control, the emitter and the load
    generators pay that on every batch."""
    from kafka.record import util

    assert util.crc32c_c is not None, "pip install the crc32c package (requirements.txt)"
    assert util.calc_crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value
