"""spark_jobs.rebalance_signals → Kafka → ballast.watch: a driver's rebalance signal, sent after committed
epochs, read back the way the Airflow asset watcher reads it (confluent-kafka, the Kafka
provider's client) and accepted; records that are not signals of the topic's job are skipped."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from ballast.job_messages import RebalanceSignal
from ballast.policy.signals import GROWING, SignalConfig
from ballast.protocol import signals_topic
from ballast.watch import accept_signal
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import Journal
from spark_jobs.rebalance_signals import RebalanceSignals
from spark_jobs.run_config import RunConfig, ensure_job_topics

pytestmark = pytest.mark.dataplane


def _read_all(bootstrap: str, topic: str, n: int, timeout_s: float = 30.0) -> list:  # type: ignore[type-arg]
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, end = [], time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < end:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m)
    finally:
        c.close()
    return got


def test_a_growing_backlog_is_signalled_once_and_the_watcher_accepts_it(kafka_bootstrap, unique_name, tmp_path):
    job = unique_name
    ensure_job_topics(kafka_bootstrap, job, 1)
    cfg = RunConfig(job=job, input_topic=f"{job}.in", checkpoint_dir=str(tmp_path), bootstrap=kafka_bootstrap,
                    db_url="sqlite://", signal=SignalConfig(epochs=3, hold_s=3600, budget_ms=1000))
    clients = JobClients(cfg, Journal(str(tmp_path)), [cfg.input_topic], threading.Event())
    clients.open()
    try:
        sender = RebalanceSignals(cfg, clients)
        sent = [sender.after_commit(e, 1000 * e, 600.0, 2) for e in range(1, 8)]
        assert [s.reason if s else None for s in sent] == [None, None, None, GROWING, None, None, None]
        # a stranger's record and another job's signal on this job's topic
        other = RebalanceSignal(job="someone-else", operator="keycount", epoch=1, reason=GROWING, detail="x",
                                backlog=1, busy=0.1, at=datetime.now(UTC))
        clients.producer.send(signals_topic(job), value=b"not json")
        clients.producer.send(signals_topic(job), value=other.to_json())
        clients.producer.flush(10)
    finally:
        clients.close()

    records = _read_all(kafka_bootstrap, signals_topic(job), 3)
    assert len(records) == 3
    payloads = [accept_signal(m) for m in records]
    assert payloads[1:] == [None, None]  # skipped: they must not wake the DAG, nor stop the watcher
    p = payloads[0]
    assert p is not None and (p["job"], p["operator"], p["reason"], p["epoch"]) == (job, "keycount", GROWING, 4)
    assert p["backlog"] == 4000 and "1000 -> 4000" in p["detail"]


def test_the_epoch_budget_follows_a_new_trigger_unless_the_job_set_its_own() -> None:
    base = dict(job="j", input_topic="j.in", checkpoint_dir="/tmp/unused", bootstrap="127.0.0.1:1", db_url="sqlite://",
                trigger_ms=500)
    derived = RebalanceSignals(RunConfig(**base), clients=None)  # type: ignore[arg-type]
    assert derived.signaller.cfg.budget_ms == 500
    derived.follow_trigger(2000)
    assert derived.signaller.cfg.budget_ms == 2000, "a settings step's interval is the new epoch budget"
    derived.follow_trigger(0)
    assert derived.signaller.cfg.budget_ms == 1000, "no wait between epochs: the default budget"
    own = RebalanceSignals(RunConfig(**base, signal=SignalConfig(budget_ms=750)), clients=None)  # type: ignore[arg-type]
    own.follow_trigger(2000)
    assert own.signaller.cfg.budget_ms == 750, "a configured budget is the job's own choice"
