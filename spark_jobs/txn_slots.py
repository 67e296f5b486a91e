"""A worker slot's transactional identity: its Kafka transactional id, its commit marker, and what
a task needs to write (`TxnTarget`). The writer is the JVM's (spark_jobs.txn_output); the tests
(and an operator inspecting a slot) read markers with `read_last_marker`, a second implementation
of the writer's read (io.ballast.sink.Marker.readLast) on purpose: it checks the JVM's markers from
outside."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

#: clients' back-off between retries: kafka-python's 100 ms default costs ~200 ms per request that retries
RETRY_BACKOFF_MS = 20


def transactional_id(job: str, operator: str, worker: int) -> str:
    """The Kafka transactional id of worker slot `worker` of `operator` in `job` (the writer's own:
    io.ballast.sink.TxnTarget.transactionalId)."""
    return f"ballast.{job}.{operator}.w{worker}"


@dataclass(frozen=True, order=True)
class Marker:
    """A committed (epoch, worker) of one durable store: its outputs are visible to read_committed.
    The bytes are the JVM writer's (io.ballast.sink.Marker)."""

    store: str
    epoch: int
    worker: int

    def key(self) -> bytes:
        return b"w%d" % self.worker

    def value(self) -> bytes:
        return json.dumps({"store": self.store, "epoch": self.epoch, "worker": self.worker},
                          sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes | None) -> Marker | None:
        """A marker from its value; None for anything else (a tombstone, another format)."""
        if not raw:
            return None
        try:
            d = json.loads(raw)
            return cls(str(d["store"]), int(d["epoch"]), int(d["worker"]))
        except (ValueError, KeyError, TypeError):
            return None

    def covers(self, store: str, epoch: int) -> bool:
        """Whether this being the slot's last marker means (epoch, this worker) is committed."""
        return self.store == store and self.epoch >= epoch


@dataclass(frozen=True)
class TxnTarget:
    """What a task needs to write its outputs transactionally; built by the driver, given to the writer."""

    bootstrap: str
    job: str
    operator: str
    store_id: str
    commits_topic: str
    client_kwargs: dict[str, Any] = field(default_factory=dict)  # kafka-python's SASL/TLS (ballast.kafka_security)
    outage_s: float = 300.0  # how long a task keeps trying through broker errors and fencing


def read_last_marker(t: TxnTarget, worker: int, timeout_s: float = 30.0) -> Marker | None:
    """The last committed marker on partition `worker` of the marker topic (read_committed), None
    if there is none. Reads a window before the end, widened while it holds no committed marker
    (aborted attempts leave records only a read_uncommitted reader sees)."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(t.commits_topic, worker)
    c = KafkaConsumer(bootstrap_servers=t.bootstrap, enable_auto_commit=False, group_id=None,
                      isolation_level="read_committed", retry_backoff_ms=RETRY_BACKOFF_MS, **t.client_kwargs)
    try:
        c.assign([tp])
        end = c.end_offsets([tp])[tp]
        start_offset = c.beginning_offsets([tp])[tp]
        window = 16
        deadline = time.time() + timeout_s
        while True:
            lo = max(start_offset, end - window)
            c.seek(tp, lo)
            last: Marker | None = None
            while c.position(tp) < end:
                if time.time() > deadline:
                    raise TimeoutError(f"reading {t.commits_topic}[{worker}] did not reach offset {end}")
                for msgs in c.poll(timeout_ms=200).values():
                    for msg in msgs:
                        if msg.offset < end:
                            last = Marker.decode(msg.value) or last
            if last is not None or lo <= start_offset:
                return last
            window *= 8
    finally:
        c.close()
