"""Kafka with authentication (issue 14): a separate SASL/SCRAM broker with ACLs on free ports
(the other tests keep the plaintext one). Only the controller's principal may write
`<job>.control`; only the job's may write its acks and outputs; an unknown principal is refused
at the door; the job itself runs on that broker as its own principal."""

from __future__ import annotations

from datetime import UTC, datetime

import ballast_stack as stack  # loaded by tests/conftest.py (scripts/stack.py)
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from ballast.kafka_security import KafkaSecurity
from ballast.protocol import ControlStep, Move, acks_topic, control_topic, message_key
from spark_jobs.output import output_topic
from spark_jobs.runner import RunConfig, ensure_job_topics, start_job
from tests.helpers.brokers import own_broker
from tests.helpers.dp_helpers import checkpoints
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.security, pytest.mark.services]  # brokers of its own


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):  # type: ignore[no-untyped-def]
    with own_broker(tmp_path_factory.mktemp("sasl-broker"), "kafka-sasl", auth="scram") as broker:
        yield broker


def _producer(broker, user: str | None, password: str | None = None) -> KafkaProducer:  # type: ignore[no-untyped-def]
    conf = broker.client_config(user) if password is None else {**broker.client_config("job"), "sasl.username": user,
                                                                 "sasl.password": password}
    return KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", max_block_ms=10000, request_timeout_ms=10000,
                         **KafkaSecurity.from_config(conf).python_kwargs())


def _send(p: KafkaProducer, topic: str, value: bytes = b"x") -> None:
    try:
        p.send(topic, key=b"k", value=value).get(timeout=20)
    finally:
        p.close(timeout=5)


def test_principals_and_acls(sasl_broker, unique_name):
    job = unique_name
    sasl_broker.grant_job(job, f"{job}.in")
    ensure_job_topics(sasl_broker.bootstrap, job, 2, KafkaSecurity.from_config(sasl_broker.client_config("admin")))

    # no credentials at all / a principal the broker does not know: refused at authentication
    with pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=sasl_broker.bootstrap, max_block_ms=5000, request_timeout_ms=5000,
                      bootstrap_timeout_ms=5000).send(control_topic(job), b"x").get(timeout=10)
    with pytest.raises(KafkaError):
        _send(_producer(sasl_broker, "mallory", "guessed-password"), control_topic(job))
    # authenticated, but not allowed: the job cannot write its control topic, the controller
    # cannot write the job's acks or outputs
    with pytest.raises(TopicAuthorizationFailedError):
        _send(_producer(sasl_broker, "job"), control_topic(job))
    with pytest.raises(TopicAuthorizationFailedError):
        _send(_producer(sasl_broker, "controller"), acks_topic(job))
    with pytest.raises(TopicAuthorizationFailedError):
        _send(_producer(sasl_broker, "controller"), output_topic(job))
    # what each is for works
    _send(_producer(sasl_broker, "controller"), control_topic(job))
    _send(_producer(sasl_broker, "job"), acks_topic(job))
    _send(_producer(sasl_broker, "job"), output_topic(job))
    admin = KafkaAdminClient(bootstrap_servers=sasl_broker.bootstrap, **sasl_broker.client_kwargs("admin"))
    try:
        assert control_topic(job) in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.dataplane
@pytest.mark.slow
def test_job_runs_as_its_own_principal_on_the_sasl_broker(spark, sasl_broker, unique_name, tmp_path, db_url):
    """Spark's Kafka source and sink, the job's producer/consumer and topic creation all use the
    SASL settings (the Kafka provider's connection format); a step from the controller's
    principal applies and its ack comes back from the job's."""
    job, topic = unique_name, f"{unique_name}.in"
    sasl_broker.grant_job(job, topic)
    admin_sec = KafkaSecurity.from_config(sasl_broker.client_config("admin"))
    stack.ensure_topics({topic: 2}, sasl_broker.bootstrap, admin_sec)
    p = _producer(sasl_broker, "admin")
    for i in range(2000):
        p.send(topic, key=b"k%03d" % (i % 300), value=b"1", partition=i % 2)
    p.flush(timeout=60)
    p.close()
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=sasl_broker.bootstrap,
                    db_url=db_url, bins=8, workers=2, trigger_ms=200,
                    kafka_security=KafkaSecurity.from_config(sasl_broker.client_config("job")))
    runner = start_job(spark, cfg)
    try:
        now = datetime.now(UTC)
        step = ControlStep(job=job, operator="keycount", plan_id="sasl", step=1, steps=1, kind="moves",
                           moves=(Move(0, 0, 1),), workers=2, map_version=0, issued_at=now, effective_at=now)
        ctl = _producer(sasl_broker, "controller")
        ctl.send(control_topic(job), key=message_key(job, "keycount"), value=step.to_json()).get(timeout=20)
        ctl.close()
        c = wait_until(lambda: checkpoints(db_url, job).get(("sasl", 1)), 180, "the step's checkpoint", poll=0.5,
                       check=lambda: None if runner.query.exception() is None
                       else pytest.fail(str(runner.query.exception())))
        assert c.status == "applied"
    finally:
        runner.stop()
    consumer = KafkaConsumer(acks_topic(job), output_topic(job), bootstrap_servers=sasl_broker.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None,
                             **sasl_broker.client_kwargs("admin"))
    topics = {m.topic for m in consumer}
    consumer.close()
    assert {acks_topic(job), output_topic(job)} <= topics
