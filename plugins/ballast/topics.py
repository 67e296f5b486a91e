"""Create Kafka topics that are missing, with explicit partition counts (the broker does not
auto-create). The one place the stack script, the emitter and the job create topics from; no
Spark or Airflow import, so both planes can use it."""

from __future__ import annotations

from ballast.kafka_security import KafkaSecurity, client_kwargs


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

