"""Kafka with authentication (issue 14) and the stack's secure default (issue 28): a separate
SASL/SCRAM broker with ACLs on free ports (the other tests keep the plaintext one), in the mode
`make up` / `make demo` start by default. Only the controller's principal may write
`<job>.control`; only the job's may write its acks and outputs; a client without credentials, or
with a wrong password, can neither produce nor consume; the job itself runs on that broker as its
own principal with the set-up's signing key, and refuses unsigned and foreign-signed steps."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

import ballast_stack as stack  # loaded by tests/conftest.py (scripts/stack.py)
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError, TopicAuthorizationFailedError
from sqlalchemy import select

from ballast.kafka_security import KafkaSecurity
from ballast.protocol import ControlStep, Move, acks_topic, control_topic, message_key, signals_topic
from ballast.signing import Keyring, SigningKey, signed_step
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.output import output_topic
from spark_jobs.runner import RunConfig, ensure_job_topics, start_job
from tests.helpers.brokers import own_broker
from tests.helpers.dp_helpers import checkpoints
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.security, pytest.mark.services, pytest.mark.slow]  # brokers of its own


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory):  # type: ignore[no-untyped-def]
    assert stack.DEFAULT_AUTH == "scram"  # the mode `make up` / `make demo` start the stack's broker in
    with own_broker(tmp_path_factory.mktemp("sasl-broker"), "kafka-sasl", auth=stack.DEFAULT_AUTH) as broker:
        yield broker


def _refusals(db_url: str, job: str) -> list[str]:
    """The reasons of the job's `control_rejected` events (a message refused before any step row)."""
    with session_scope(db_url) as s:
        return sorted(e.message for e in s.scalars(select(m.Event).where(m.Event.job == job,
                                                                            m.Event.kind == "control_rejected")))


def _consume(broker, conf: dict[str, str], topic: str) -> int:  # type: ignore[no-untyped-def]
    """Records of `topic` a consumer with client properties `conf` reads; raises when refused."""
    c = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", group_id=None,
                      consumer_timeout_ms=5000, request_timeout_ms=5000, bootstrap_timeout_ms=5000,
                      **KafkaSecurity.from_config(conf).python_kwargs())
    try:
        return sum(1 for _ in c)
    finally:
        c.close()


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


def _watch(broker, group: str, topic: str) -> bytes:  # type: ignore[no-untyped-def]
    """One record of `topic` read as the asset watcher reads it (confluent-kafka, the controller)."""
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  **broker.client_config("controller")})
    c.subscribe([topic])
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end:
            m = c.poll(1.0)
            if m is None:
                continue
            if m.error():
                raise RuntimeError(str(m.error()))
            return bytes(m.value())
        raise RuntimeError(f"nothing read from {topic} in 30 s")
    finally:
        c.close()


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
    # nor can they read: no credentials, a wrong password of a real principal, an unknown principal
    wrong = {**sasl_broker.client_config("job"), "sasl.password": "wrong-password"}
    mallory = {**sasl_broker.client_config("job"), "sasl.username": "mallory", "sasl.password": "guessed"}
    for topic in (control_topic(job), output_topic(job)):
        for conf in ({}, wrong, mallory):
            with pytest.raises(KafkaError):
                _consume(sasl_broker, conf, topic)
    with pytest.raises(KafkaError):  # and a wrong password does not produce either
        _send(_producer(sasl_broker, "job", "wrong-password"), output_topic(job))
    assert _consume(sasl_broker, sasl_broker.client_config("job"), control_topic(job)) == 1  # the job reads it
    # the job signals its rebalance DAG; the asset watcher reads them as the controller, in the
    # watchers' group, with the Kafka provider's client (confluent-kafka) and stack_airflow's config
    _send(_producer(sasl_broker, "job"), signals_topic(job), b"signal")
    with pytest.raises(TopicAuthorizationFailedError):
        _send(_producer(sasl_broker, "controller"), signals_topic(job))  # the controller only reads them
    assert _watch(sasl_broker, "ballast-watch", signals_topic(job)) == b"signal"
    with pytest.raises(RuntimeError, match="GROUP_AUTHORIZATION_FAILED|Group authorization failed"):
        _watch(sasl_broker, "another-group", signals_topic(job))
    admin = KafkaAdminClient(bootstrap_servers=sasl_broker.bootstrap, **sasl_broker.client_kwargs("admin"))
    try:
        assert control_topic(job) in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.dataplane
@pytest.mark.slow
def test_job_runs_as_its_own_principal_on_the_sasl_broker(spark, sasl_broker, unique_name, tmp_path, db_url,
                                                          caplog):
    """The secure default end to end: Spark's Kafka source and sink, the job's producer/consumer
    and topic creation all use the SASL settings (the Kafka provider's connection format), and the
    job verifies with the key the stack's set-up makes. An unsigned step and one signed with a
    foreign key (another installation's, and a guessed secret under the right key id) are refused
    — logged, recorded, acked as rejected, the map untouched — the job runs on, and the genuine
    signed step from the controller's principal applies and its ack comes back from the job's."""
    job, topic = unique_name, f"{unique_name}.in"
    sasl_broker.grant_job(job, topic)
    admin_sec = KafkaSecurity.from_config(sasl_broker.client_config("admin"))
    stack.ensure_topics({topic: 2}, sasl_broker.bootstrap, admin_sec)
    p = _producer(sasl_broker, "admin")
    for i in range(2000):
        p.send(topic, key=b"k%03d" % (i % 300), value=b"1", partition=i % 2)
    p.flush(timeout=60)
    p.close()
    made = stack.ensure_signing_key(tmp_path / "state")  # what `make up` makes and hands Airflow and the jobs
    ours = SigningKey.of(made["kid"], made["secret"])
    foreign = stack.ensure_signing_key(tmp_path / "other-installation")
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=sasl_broker.bootstrap,
                    db_url=db_url, bins=8, workers=2, trigger_ms=200,
                    kafka_security=KafkaSecurity.from_config(sasl_broker.client_config("job")),
                    control_keyring=Keyring({ours.kid: ours.secret}))
    with caplog.at_level(logging.INFO, logger="ballast.runner"):
        runner = start_job(spark, cfg)
    assert any(f"must be signed: key id(s) {ours.kid}" in r.getMessage() for r in caplog.records)

    def alive() -> None:
        if not runner.query.isActive or runner.query.exception() is not None:
            pytest.fail(f"the job stopped: {runner.query.exception()}")

    def step(plan: str) -> ControlStep:
        now = datetime.now(UTC)
        return ControlStep(job=job, operator="keycount", plan_id=plan, step=1, steps=1, kind="moves",
                           moves=(Move(0, 0, 1),), workers=2, map_version=0, issued_at=now, effective_at=now)

    try:
        ctl = _producer(sasl_broker, "controller")
        with caplog.at_level(logging.WARNING, logger="ballast.runner"):
            for value in (step("unsigned").to_json(),
                          signed_step(step("foreign"), SigningKey.of(foreign["kid"], foreign["secret"])),
                          signed_step(step("guessed"), SigningKey.of(ours.kid, "guessed-secret-0123456789"))):
                ctl.send(control_topic(job), key=message_key(job, "keycount"), value=value).get(timeout=20)
            ctl.flush()
            reasons = wait_until(lambda: r if len(r := _refusals(db_url, job)) >= 3 else None, 180,
                                 "three refusals", poll=0.5, check=alive)
            assert any("unsigned control message" in r for r in reasons), reasons
            assert any(f"unknown key id '{foreign['kid']}'" in r for r in reasons), reasons
            assert any(f"forged or altered control message: the MAC does not match key id '{ours.kid}'" in r
                       for r in reasons), reasons
            logged = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
            assert len(logged) >= 3 and any("unsigned" in m for m in logged), logged
            assert not checkpoints(db_url, job), "a refused message makes no step checkpoint and moves no bin"
            assert made["secret"] not in caplog.text and foreign["secret"] not in caplog.text
            ctl.send(control_topic(job), key=message_key(job, "keycount"),
                     value=signed_step(step("genuine"), ours)).get(timeout=20)
            ctl.close()
        c = wait_until(lambda: checkpoints(db_url, job).get(("genuine", 1)), 180, "the step's checkpoint", poll=0.5,
                       check=alive)
        assert c.status == "applied" and set(checkpoints(db_url, job)) == {("genuine", 1)}
    finally:
        runner.stop()
    consumer = KafkaConsumer(acks_topic(job), output_topic(job), bootstrap_servers=sasl_broker.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000, group_id=None,
                             **sasl_broker.client_kwargs("admin"))
    msgs = list(consumer)
    consumer.close()
    assert {acks_topic(job), output_topic(job)} <= {m.topic for m in msgs}
    acks = [json.loads(m.value) for m in msgs if m.topic == acks_topic(job)]
    rejected = [a for a in acks if a["status"] == "rejected"]  # the plan id of an unauthenticated body is not echoed
    assert sorted(a["reason"].split(":")[0] for a in rejected) == ["rejected signature"] * 3, rejected
    assert [a["plan_id"] for a in acks if a["status"] == "applied"] == ["genuine"]
