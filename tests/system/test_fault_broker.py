"""The Kafka broker stopped for 30 s during a batched migration, then restarted (issue 14), on its
own broker instance and ports. The job and the plan continue; nothing is lost or doubled (the
oracle of tests/helpers/dp_helpers.py); the plan ends applied — or clearly failed, never silently stuck.
Kept down past a short `--kafka-outage-s`, the broker fails the query (the CLI's exit 1), and a
restart is exactly once; a query waiting for input fails after the budget too, not after three."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import pytest
from kafka import KafkaConsumer, TopicPartition

from spark_jobs.job_clients import JobClients
from spark_jobs.journal import Journal
from spark_jobs.run_config import RunConfig
from spark_jobs.runner import start_job
from tests.helpers.brokers import own_broker
from tests.helpers.fault_helpers import (
    check_exactly_once,
    check_plan_ended,
    fail_past_budget_then_restart,
    migrate_through_outage,
    planned_job,
)
from tests.helpers.wait import wait_until
from tests.helpers.xdist_groups import OUTAGES

pytestmark = [pytest.mark.faults, pytest.mark.dataplane, pytest.mark.slow, OUTAGES]

BINS = 16
N = 24_000
OUTAGE_S = 30
BUDGET_S = 15  # the short --kafka-outage-s the second test outlasts


@pytest.fixture
def fault_broker(tmp_path):  # type: ignore[no-untyped-def]
    with own_broker(tmp_path / "kafka-root", "kafka-fault") as broker:
        yield broker


def test_broker_down_30s_during_a_batched_migration(spark, fault_broker, unique_name, tmp_path, db_url, caplog):
    broker = fault_broker
    bootstrap = broker.bootstrap
    job = unique_name
    cfg, maps = planned_job(bootstrap, db_url, job, str(tmp_path / "ckpt"), BINS, N, 12, "plan-broker")
    topic = cfg.input_topic
    caplog.set_level(logging.WARNING)
    probe = KafkaConsumer(bootstrap_servers=bootstrap, **cfg.security.python_kwargs())  # built as the job's are
    part = TopicPartition(topic, 0)
    probe.end_offsets([part])  # connected before the outage, as a task's cached marker consumer is
    reconnect_s: list[float] = []

    def up_and_probe() -> None:
        broker.up()
        t0 = time.monotonic()
        probe.end_offsets([part], timeout_ms=20_000)
        reconnect_s.append(time.monotonic() - t0)

    runner = start_job(spark, cfg)
    try:
        out = migrate_through_outage(runner, cfg, db_url, bootstrap, "plan-broker", N, broker.down, up_and_probe,
                                     OUTAGE_S)
    finally:
        runner.stop()
        probe.close()
    # kafka-python's own 30 s reconnect back-off made this ~20-30 s (ballast.kafka_security)
    assert reconnect_s[0] < 5, f"a client connected before the outage took {reconnect_s[0]:.1f}s to answer after it"
    assert out["controller"].result and out["controller"].result["map_version"] == len(maps)
    stats = check_exactly_once(db_url, bootstrap, job, topic, cfg.checkpoint_dir, cfg.state_location,
                               maps[-1][0], maps[-1][1], BINS, N, "plan-broker", len(maps))
    warned = sorted({r.getMessage()[:120] for r in caplog.records if r.name.startswith("ballast")})
    print(f"broker down {OUTAGE_S}s; a connected client answered {reconnect_s[0]:.1f}s after the restart; plan + "
          f"input done {out['recovered_s']:.0f}s after it; {stats}; "
          f"warnings: {warned[:6]}")


def test_broker_down_past_the_outage_budget_fails_the_query_and_a_restart_is_exactly_once(
        spark, fault_broker, unique_name, tmp_path, db_url):
    broker = fault_broker
    bootstrap = broker.bootstrap
    job = unique_name
    cfg, maps = planned_job(bootstrap, db_url, job, str(tmp_path / "ckpt"), BINS, N // 2, 13, "plan-broker-long")
    cfg = replace(cfg, kafka_outage_s=BUDGET_S)
    runner = start_job(spark, cfg)
    out = fail_past_budget_then_restart(spark, runner, cfg, db_url, bootstrap, "plan-broker-long", N // 2,
                                        broker.down, broker.up)
    assert out["failed_after_s"] >= BUDGET_S, "the query failed before its outage budget was spent"
    # a task waits one flush (the budget) and then the budget from its first error; nothing more
    assert out["failed_after_s"] < 2 * BUDGET_S + 10, f"the query failed {out['failed_after_s']:.0f}s into the outage"
    stats = check_plan_ended(db_url, bootstrap, job, cfg.input_topic, cfg.checkpoint_dir, cfg.state_location, maps,
                             BINS, N // 2, "plan-broker-long", out["controller"])
    print(f"--kafka-outage-s {BUDGET_S}: the query failed {out['failed_after_s']:.0f}s into the outage "
          f"({str(out['error'])[:200]}); plan {out['controller'].error or 'applied'}; {stats}")


def test_a_query_waiting_for_input_fails_one_budget_into_the_outage(spark, fault_broker, unique_name, tmp_path):
    """A query between epochs is in Spark's offset lookup, which tries three times: with a whole
    budget per try, a 15 s budget failed the query 48 s into the outage (CI of c274315)."""
    import ballast_stack as stack  # scripts/stack.py, loaded by tests/conftest.py

    broker, topic = fault_broker, unique_name
    stack.ensure_topics({topic: 2}, broker.bootstrap)
    cfg = RunConfig(job=unique_name, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"),
                    bootstrap=broker.bootstrap, db_url="sqlite://", kafka_outage_s=BUDGET_S)
    opts = JobClients(cfg, Journal(cfg.checkpoint_dir), [topic], threading.Event()).spark_kafka_options(source=True)
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).options(**opts).load()
             .writeStream.format("noop").option("checkpointLocation", cfg.checkpoint_dir)
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None, 120, "the query's first trigger")
        t_down = time.time()
        broker.down()
        wait_until(lambda: not query.isActive, 4 * BUDGET_S + 60, "the query to fail past its outage budget")
        failed_after = time.time() - t_down
    finally:
        query.stop()
        broker.up()
    assert query.exception() is not None
    assert BUDGET_S <= failed_after < BUDGET_S + 10, f"the query failed {failed_after:.0f}s into the outage"
    print(f"--kafka-outage-s {BUDGET_S}: a query waiting for input failed {failed_after:.0f}s into the outage")
