"""The runner's service calls inside an epoch: metrics DB and Kafka with outage budgets, Spark's
Kafka options, offset ranges from Spark's offset log, end offsets and the input's backlog.

A component of `spark_jobs.runner.JobRunner`: it owns the job's own Kafka producer and consumer
(opened at start, closed at stop) and reads the runner's stop flag, so a retry loop ends when the
job stops; the other components reach Kafka and the metrics DB only through it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from spark_jobs.journal import Journal
from spark_jobs.offsets import epoch_ranges
from spark_jobs.records import MAX_RECORD_BYTES
from spark_jobs.run_config import RunConfig

log = logging.getLogger("ballast.runner")

#: The longest a fetch of the source's consumers waits at the broker for data (Kafka's default:
#: 500 ms). Why: a task that reads a partition with no records after its range — the control topic,
#: the tick topic, a quiet input — waited out one whole fetch wait before it ended. On 2 cores the
#: control record's task took 531-644 ms of wall time with 8-23 ms of CPU, and the epoch that
#: received any control step was twice as long as the ones around it (bench/REPORT.md §13: the live
#: upgrade's max / steady p99). At 10 ms that task takes 31-82 ms, as long as an input task. A
#: consumer's poll still waits for data as long as before (Spark's poll timeout): only the broker
#: answers an empty fetch sooner, and Spark's source fetches only ranges that exist.
SOURCE_FETCH_WAIT_MS = 10

#: Tries of the source's offset lookup (Spark's `fetchOffset.numRetries`; Spark's default is 3).
#: Each try waits `default.api.timeout.ms`, which must be the whole budget because the executors'
#: consumers get the same value (a third of it failed a task's `position` 6 s into a 15 s budget);
#: three tries of a whole budget failed a 15 s budget 48 s into the outage (CI of c274315). One
#: try loses Spark's re-read of end offsets Kafka answered wrongly (KAFKA-7703, a consumer bug; the
#: lookup asks the admin client): wrong offsets then fail the query as data loss, never pass silently.
OFFSET_FETCH_ATTEMPTS = 1

#: The shortest a task's poll for its input waits for records, whatever the budget: a live broker
#: on a loaded machine must not fail a fetch.
MIN_POLL_TIMEOUT_MS = 10_000


class JobClients:
    """Retrying DB/Kafka calls, the job's own Kafka clients, and the Kafka-side measurements of an epoch."""

    def __init__(self, cfg: RunConfig, journal: Journal, read_topics: list[str], stopping: threading.Event) -> None:
        self.cfg = cfg
        self.journal = journal
        self.read_topics = read_topics  # the input topics the operator reads (its `sources`)
        self._stopping = stopping
        self.producer: Any = None
        self.consumer: Any = None
        self._prev_end: tuple[float, int] | None = None  # (time, sum of input end offsets)

    def open(self) -> None:
        """The job's producer (acks, ticks) and consumer (control records, offsets), with its security."""
        from kafka import KafkaConsumer, KafkaProducer

        kw = self.cfg.security.python_kwargs()
        self.producer = KafkaProducer(bootstrap_servers=self.cfg.bootstrap, acks="all", linger_ms=5, **kw)
        self.consumer = KafkaConsumer(bootstrap_servers=self.cfg.bootstrap, enable_auto_commit=False, group_id=None,
                                      **kw)

    def close(self) -> None:
        """Close both clients; a failure to close is not the stop's failure."""
        for c in (self.producer, self.consumer):
            try:
                if c is not None:
                    c.close()
            except Exception:
                pass

    def offset_ranges(self, epoch: int) -> dict[str, dict[int, tuple[int, int]]] | None:
        """{topic: {partition: (start, end)}} of this epoch, from Spark's offset log (no Spark job)."""
        return epoch_ranges(self.journal.spark_checkpoint, epoch, self._earliest)

    def _earliest(self, topic: str, p: int) -> int:
        from kafka import TopicPartition

        tp = TopicPartition(topic, p)
        return int(self.kafka("offset lookups", self.consumer.beginning_offsets, [tp])[tp])

    def db(self, what: str, fn: Any, *args: Any) -> Any:
        """A metrics-DB write of the epoch (idempotent: insert-once rows, replaced metrics, one
        transaction). While the DB is unreachable the epoch waits and retries — it pauses, it
        never skips or doubles a step — for up to `db_outage_s`, then fails (a restart replays it)."""
        from migrations_db.db import is_unreachable

        return self._retry("metrics DB", what, self.cfg.db_outage_s, is_unreachable, fn, *args)

    def kafka(self, what: str, fn: Any, *args: Any) -> Any:
        """A call of the job's own Kafka clients in the epoch (acks: re-sent acks are harmless;
        offsets: a read). While the broker is away the epoch waits up to `kafka_outage_s`."""
        from kafka.errors import KafkaError

        return self._retry("Kafka broker", what, self.cfg.kafka_outage_s, lambda e: isinstance(e, KafkaError), fn,
                           *args)

    def _retry(self, service: str, what: str, budget_s: float, transient: Any, fn: Any, *args: Any) -> Any:
        deadline, delay, since = time.time() + budget_s, 1.0, time.time()
        while True:
            try:
                out = fn(*args)
                if time.time() - since > 1.5:
                    log.warning("%s reachable again: %s done after %.0fs", service, what, time.time() - since)
                return out
            except Exception as exc:
                if not transient(exc) or time.time() > deadline or self._stopping.is_set():
                    raise
                log.warning("%s unreachable while writing %s (%s); the epoch waits and retries in %.0fs",
                            service, what, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def spark_kafka_options(self, source: bool) -> dict[str, str]:
        """Spark's Kafka clients: the job's SASL/TLS settings, and timeouts that ride out a broker
        outage of `kafka_outage_s` and no longer (Spark's defaults fail the query after 60 s); the
        source's consumers wait at most `SOURCE_FETCH_WAIT_MS` for a fetch (see there)."""
        budget = int(self.cfg.kafka_outage_s * 1000)
        # Kafka's clients refuse default.api.timeout.ms (and the producer's delivery.timeout.ms) below
        # request.timeout.ms (30 s by default): a short budget shortens the request timeout
        request = max(min(30_000, budget // 2), 1_000)
        ms = str(max(budget, request + 1_000))
        opts = {**self.cfg.security.spark_options(), "kafka.default.api.timeout.ms": ms,
                "kafka.request.timeout.ms": str(request)}
        if source:
            opts.update({"kafka.fetch.max.wait.ms": str(SOURCE_FETCH_WAIT_MS),
                         "fetchOffset.numRetries": str(OFFSET_FETCH_ATTEMPTS),  # see there
                         # a task's fetch of its input waits out the budget (Spark's own: 120 s, whatever the budget)
                         "kafkaConsumer.pollTimeoutMs": str(max(budget, MIN_POLL_TIMEOUT_MS))})
        else:  # records up to the size the job's own topics take (spark_jobs.records)
            opts.update({"kafka.max.block.ms": ms, "kafka.delivery.timeout.ms": ms,
                         "kafka.max.request.size": str(MAX_RECORD_BYTES)})
        return opts

    def backlog(self, end_offsets: dict[tuple[str, int], int]) -> tuple[int | None, float | None, dict[str, int]]:
        """Rows of the input topics not read yet, their arrival rate, and their latest end offsets
        ({partition: end} for one input topic, {"topic:partition": end} for several)."""
        from kafka import TopicPartition

        topics = self.read_topics
        try:
            tps = [TopicPartition(t, p) for t in topics for p in sorted(self.consumer.partitions_for_topic(t) or ())]
            latest = self.consumer.end_offsets(tps)
        except Exception:
            log.exception("could not read end offsets of %s", ",".join(topics))
            return None, None, {}
        now = time.time()
        total = sum(latest.values())
        backlog = (sum(max(latest[tp] - end_offsets.get((tp.topic, tp.partition), 0), 0) for tp in tps)
                   if end_offsets else None)
        rate = None
        if self._prev_end is not None and now > self._prev_end[0]:
            rate = max(total - self._prev_end[1], 0) / (now - self._prev_end[0])
        self._prev_end = (now, total)
        name = (lambda tp: str(tp.partition)) if len(topics) == 1 else (lambda tp: f"{tp.topic}:{tp.partition}")
        return backlog, rate, {name(tp): int(latest[tp]) for tp in tps}
