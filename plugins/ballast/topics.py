"""Create Kafka topics that are missing, with explicit partition counts (the broker does not
auto-create), and return once they take writes. The one place the stack script, the emitter and the
job create topics from; no Spark or Airflow import, so both planes can use it."""

from __future__ import annotations

from ballast.errors import BallastError
from ballast.kafka_security import KafkaSecurity, client_kwargs


class TopicsNotReady(BallastError, RuntimeError):
    """A created topic's partitions did not all answer from their leader in time."""


def create_missing_topics(bootstrap: str, topics: dict[str, int], timeout_ms: int = 10000,
                          security: KafkaSecurity | None = None,
                          configs: dict[str, dict[str, str]] | None = None) -> None:
    """Create each topic in `topics` ({name: partitions}) that does not exist yet; racing creators are fine.

    `security`: SASL/TLS settings (ballast.kafka_security; default BALLAST_KAFKA_CONFIG, else PLAINTEXT).
    `configs`: topic configs of a created topic ({name: {"max.message.bytes": ...}})."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms, **client_kwargs(security))
    try:
        have = set(admin.list_topics())
        new = [NewTopic(t, n, 1, topic_configs=(configs or {}).get(t, {})) for t, n in topics.items() if t not in have]
        if new:
            try:
                admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()
    if new:
        wait_writable(bootstrap, {t.name: t.num_partitions for t in new}, timeout_ms / 1000, security)


def wait_writable(bootstrap: str, topics: dict[str, int], timeout_s: float = 10.0,
                  security: KafkaSecurity | None = None) -> None:
    """Return once every partition of `topics` ({name: partitions}) answers a ListOffsets request
    from its leader; TopicsNotReady after `timeout_s`.

    Why: a created topic is described with its partitions and their leader at once, but the leader
    takes them on a moment later. A producer that writes in that moment gets NOT_LEADER_OR_FOLLOWER,
    and Kafka's idempotent producer (Spark's sink) can then retry with OUT_OF_ORDER_SEQUENCE_NUMBER
    until its delivery timeout: a suite run saw a write to a fresh topic fail that way after 120 s."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    parts = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_kwargs(security))
    try:  # kafka-python retries a retriable answer (no leader yet, not the leader) until the timeout
        consumer.end_offsets(parts, timeout_ms=int(timeout_s * 1000))
    except KafkaError as e:
        raise TopicsNotReady(f"topics {sorted(topics)} were created but not every partition answered from its "
                             f"leader within {timeout_s:.0f} s ({e!r}): is the broker at {bootstrap} healthy?") from e
    finally:
        consumer.close()


def handoff_topic(job: str, operator: str) -> str:
    """Where operator `operator` of a multi-operator job writes its outputs for the next operator
    (the last operator writes `<job>.output`). Operator names of such jobs are topic-safe."""
    return f"{job}.{operator}.out"


def job_topics(job: str, input_topics: list[str]) -> list[tuple[str, str]]:
    """(role, topic) of every topic a job reads or writes: its inputs, output and dead letters (the
    data plane's names, spark_jobs.output), and its control, acks and signals (ballast.protocol)."""
    from ballast.protocol import acks_topic, control_topic, signals_topic

    return [*(("reads", t) for t in input_topics), ("writes", f"{job}.output"), ("dead letters", f"{job}.dlq"),
            ("control", control_topic(job)), ("acks", acks_topic(job)), ("signals", signals_topic(job))]

