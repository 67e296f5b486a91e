"""Hostile, fuzzed and unauthenticated control input against a live job on the real broker: the
job keeps running, every record is answered with a reason, the map moves only for genuine steps,
and the state equals the reference (issue 14)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from sqlalchemy import select

from ballast.protocol import ControlStep, Move, acks_topic, control_topic, message_key
from ballast.signing import Keyring, SigningKey, signed_step
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.bins import uniform_assignment
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.runner import RunConfig, ensure_job_topics, start_job
from tests.helpers.dp_helpers import check_state, checkpoints, produce, read_json_topic, reference_by_epoch, zipf_keys
from tests.helpers.fuzz_messages import encode, hostile_bytes, near_valid, valid_docs
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.security, pytest.mark.dataplane, pytest.mark.slow]

BINS = 16
BIG = 12_000_000  # the control topic and the job accept records this large, to carry 10 MB values
N_FUZZ = 300


def _step(job: str, plan: str, version: int = 0, moves=((0, 0, 1),), issued: datetime | None = None) -> ControlStep:
    now = issued or datetime.now(UTC)
    return ControlStep(job=job, operator="keycount", plan_id=plan, step=1, steps=1, kind="moves",
                       moves=tuple(Move(*mv) for mv in moves), workers=2, map_version=version, issued_at=now,
                       effective_at=now)


def _send(bootstrap: str, job: str, values: list[bytes]) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all", max_request_size=BIG + 100_000, max_block_ms=30000,
                      linger_ms=5)
    fs = [p.send(control_topic(job), key=message_key(job, "keycount"), value=v) for v in values]
    p.flush(timeout=120)
    for f in fs:
        f.get(timeout=60)
    p.close()


def _decisions(db_url: str, job: str) -> list[m.StepDecision]:
    with session_scope(db_url) as s:
        return list(s.scalars(select(m.StepDecision).where(m.StepDecision.job == job)))


def _map_versions(db_url: str, job: str) -> list[int]:
    with session_scope(db_url) as s:
        return sorted(r.map_version for r in s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job)))


def _fuzz_corpus(job: str, n: int) -> list[bytes]:
    """n generated messages: near-valid ones of this job (stale map version: rejected by state),
    near-valid and valid ones of another job, hostile bytes (deep nesting, huge arrays, 10 MB)."""
    out: list[bytes] = []

    def stale(doc: dict) -> dict:
        return {**doc, "map_version": 10_000 + len(out)} if isinstance(doc.get("map_version"), int) else doc

    strategy = st.one_of(near_valid(valid_docs(job, "keycount", BINS)).map(stale).map(encode),
                         near_valid(valid_docs("other-job", "keycount", BINS)).map(encode),
                         valid_docs("other-job", "keycount", BINS).map(encode), hostile_bytes())

    @settings(max_examples=n, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(strategy)
    def collect(raw: bytes) -> None:
        if len(out) < n:
            out.append(raw)

    collect()
    return out


def _start(spark, kafka_bootstrap, make_topics, job, tmp_path, db_url, **kw):  # type: ignore[no-untyped-def]
    topic = f"{job}.in"
    make_topics({topic: 2})
    keys = zipf_keys(6_000, 800, seed=4)
    produce(kafka_bootstrap, topic, keys, 2)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(control_topic(job), 1, 1, topic_configs={"max.message.bytes": str(BIG + 100_000)})])
    admin.close()
    ensure_job_topics(kafka_bootstrap, job, 2)
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=200, max_offsets_per_trigger=3000, **kw)
    return cfg, keys, start_job(spark, cfg)


def _finish(runner, cfg, kafka_bootstrap, keys, final) -> None:  # type: ignore[no-untyped-def]
    ckpt = cfg.checkpoint_dir + "/spark"
    try:
        wait_until(lambda: (e := committed_epochs(ckpt)) and sum(read_end_offsets(ckpt, e[-1]).get(cfg.input_topic, {})
                                                                 .values()) == len(keys), 240, "all input consumed",
                   check=lambda: _alive(runner))
    finally:
        runner.stop()
    ref, _ = reference_by_epoch(kafka_bootstrap, cfg.input_topic, ckpt, committed_epochs(ckpt))
    assert sum(ref.values()) == len(keys)
    check_state(cfg.state_location, 2, final, BINS, ref)


def _alive(runner) -> None:  # type: ignore[no-untyped-def]
    assert runner.query.isActive and runner.query.exception() is None, runner.query.exception()


def test_hostile_and_fuzzed_control_records_are_rejected_and_the_job_runs_on(
        spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url, caplog):
    job = unique_name
    corpus = _fuzz_corpus(job, N_FUZZ)
    nested = b"[" * 100_000 + b"]" * 100_000  # the 200 kB record
    ten_mb = b'{"schema": "ballast.control/v1", "reason": "' + b"z" * 10_000_000 + b'"}'
    with caplog.at_level(logging.WARNING, logger="ballast.runner"):
        cfg, keys, runner = _start(spark, kafka_bootstrap, make_topics, job, tmp_path, db_url)
    assert any(r.levelno == logging.WARNING and "NOT authenticated" in r.getMessage() for r in caplog.records)
    try:
        _send(kafka_bootstrap, job, [nested, ten_mb])
        wait_until(lambda: len(_decisions(db_url, job)) >= 2, 180, "the two hostile records judged",
                   check=lambda: _alive(runner))
        reasons = sorted(d.reason for d in _decisions(db_url, job))
        assert any("nested too deeply" in r for r in reasons) and any("larger than the 1048576-byte limit" in r
                                                                     for r in reasons), reasons
        _send(kafka_bootstrap, job, corpus)
        n = 2 + len(corpus)
        wait_until(lambda: len({(d.payload or {}).get("offset") for d in _decisions(db_url, job)}) >= n, 300,
                   f"all {n} records judged", check=lambda: _alive(runner))
        assert _map_versions(db_url, job) == [0], "a rejected record changed the map"
        _send(kafka_bootstrap, job, [_step(job, "genuine").to_json()])
        c = wait_until(lambda: checkpoints(db_url, job).get(("genuine", 1)), 120, "genuine step",
                       check=lambda: _alive(runner))
        assert c.status == "applied" and c.map_version_after == 1
    finally:
        final = uniform_assignment(BINS, 2)
        final[0] = 1
        _finish(runner, cfg, kafka_bootstrap, keys, final)
    decisions = _decisions(db_url, job)
    by_offset: dict[str, list[m.StepDecision]] = {}
    for d in decisions:
        by_offset.setdefault(d.payload["offset"], []).append(d)
    assert len(by_offset) == n + 1
    rejected = [d for d in decisions if d.action in ("reject", "supersede")]
    assert all(d.reason for d in rejected)
    assert [(d.plan_id, d.action) for d in decisions if d.action == "apply"] == [("genuine", "apply")]
    assert _map_versions(db_url, job) == [0, 1]
    acks = read_json_topic(kafka_bootstrap, acks_topic(job))
    rejected_acks = sum(1 for a in acks if a["status"] == "rejected" and a["reason"])
    assert rejected_acks >= len([d for d in decisions if d.action == "reject"])
    print(f"live fuzz: {n} records, {len(rejected)} rejected/superseded, "
          f"{sum(1 for d in decisions if d.action in ('queue', 'duplicate'))} queued/duplicate")


def test_signed_job_rejects_unsigned_forged_replayed_and_expired(spark, kafka_bootstrap, make_topics, unique_name,
                                                                 tmp_path, db_url, caplog):
    job = unique_name
    k_old, k_new = SigningKey.of("2030-01", "old-secret-0123456789"), SigningKey.of("2030-02", "new-secret-0123456789")
    ring = Keyring({k_old.kid: k_old.secret, k_new.kid: k_new.secret}, max_age_s=120)
    with caplog.at_level(logging.INFO, logger="ballast.runner"):
        cfg, keys, runner = _start(spark, kafka_bootstrap, make_topics, job, tmp_path, db_url, control_keyring=ring)
    assert any("must be signed: key id(s) 2030-01, 2030-02" in r.getMessage() for r in caplog.records)
    assert not any("NOT authenticated" in r.getMessage() for r in caplog.records)
    assert "old-secret" not in json.dumps(cfg.to_dict())
    forger = SigningKey.of("2030-01", "guessed-secret-0123456789")
    try:
        _send(kafka_bootstrap, job, [
            _step(job, "unsigned").to_json(),
            signed_step(_step(job, "forged"), forger),
            signed_step(_step("other-job", "replayed"), k_old),
            signed_step(_step(job, "expired", issued=datetime.now(UTC) - timedelta(hours=1)), k_old),
        ])
        wait_until(lambda: len(_decisions(db_url, job)) >= 4, 180, "four rejections", check=lambda: _alive(runner))
        assert _map_versions(db_url, job) == [0]
        _send(kafka_bootstrap, job, [signed_step(_step(job, "rotated-old"), k_old)])
        assert wait_until(lambda: checkpoints(db_url, job).get(("rotated-old", 1)), 120, "old key step",
                          check=lambda: _alive(runner)).status == "applied"
        _send(kafka_bootstrap, job, [signed_step(_step(job, "rotated-new", version=1, moves=((1, 0, 1),)), k_new)])
        assert wait_until(lambda: checkpoints(db_url, job).get(("rotated-new", 1)), 120, "new key step",
                          check=lambda: _alive(runner)).status == "applied"
    finally:
        final = uniform_assignment(BINS, 2)
        final[0] = final[1] = 1
        _finish(runner, cfg, kafka_bootstrap, keys, final)
    why = [d.reason for d in _decisions(db_url, job) if d.action == "reject"]
    assert len(why) == 4, why
    for expected in ("unsigned control message", "forged or altered", "replayed from another job", "expired"):
        assert sum(expected in r for r in why) == 1, (expected, why)
    cps = checkpoints(db_url, job)
    assert set(cps) == {("expired", 1), ("rotated-old", 1), ("rotated-new", 1)}, "only authentic steps have rows"
    assert cps[("expired", 1)].status == "rejected"
    acks = read_json_topic(kafka_bootstrap, acks_topic(job))
    assert sum(1 for a in acks if a["status"] == "rejected") >= 4
    assert _map_versions(db_url, job) == [0, 1, 2]
