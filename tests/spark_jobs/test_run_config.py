"""spark_jobs.run_config: what a run derives from its flags (topics, paths, the operator's import
path), a description for logs and the jobs table that never carries a secret, and the job's own
topics created with the sizes and record limits the data plane needs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

import spark_jobs.run_config as R
from ballast.kafka_security import KafkaSecurity
from ballast.signing import Keyring
from spark_jobs.records import MAX_RECORD_BYTES
from spark_jobs.run_config import COMMITS_TOPIC_CONFIG, RunConfig, as_utc, ensure_job_topics, iso, parse_iso, tick_topic
from spark_jobs.txn_output import COMMITS_PARTITIONS

pytestmark = pytest.mark.dataplane


def _cfg(**kw) -> RunConfig:  # type: ignore[no-untyped-def]
    return RunConfig(**{"job": "clicks", "input_topic": "in", "checkpoint_dir": "/ck/", "bootstrap": "b:9092",
                        "db_url": "sqlite:///m.db", **kw})


def test_derived_names_and_paths():
    cfg = _cfg()
    assert (cfg.path, cfg.output_topic, cfg.state_location) == ("keycount", "clicks.output", "/ck/state")
    assert cfg.input_topics == ["in"]
    chained = _cfg(operator="avg", operator_path="mod:Avg", output="clicks.avg.out", state_uri="s3://b/clicks",
                   input_topic=" auctions, bids,, ")
    assert (chained.path, chained.output_topic, chained.state_location) == ("mod:Avg", "clicks.avg.out",
                                                                            "s3://b/clicks")
    assert chained.input_topics == ["auctions", "bids"]


def test_security_is_the_runs_own_or_the_environments(monkeypatch):
    monkeypatch.setenv("BALLAST_KAFKA_CONFIG", json.dumps({"security.protocol": "SASL_SSL",
                                                           "sasl.mechanism": "PLAIN", "sasl.username": "env",
                                                           "sasl.password": "pw"}))
    assert _cfg().security.username == "env"
    own = KafkaSecurity.from_config({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                     "sasl.username": "job", "sasl.password": "pw"})
    assert _cfg(kafka_security=own).security is own


def test_the_description_never_carries_a_secret(monkeypatch):
    monkeypatch.delenv("BALLAST_KAFKA_CONFIG", raising=False)
    secret = "s3cret-" + "x" * 40
    cfg = _cfg(db_url="postgresql+psycopg2://ballast:pw-in-url@db:5432/metrics",
               control_keyring=Keyring({"k1": secret.encode()}, max_age_s=60.0),
               kafka_security=KafkaSecurity.from_config({"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                                                         "sasl.username": "job", "sasl.password": "kafka-pw"}))
    d = cfg.to_dict()
    text = json.dumps(d)
    assert "pw-in-url" not in text and secret not in text and "kafka-pw" not in text
    assert d["db_url"] == "postgresql+psycopg2://ballast:***@db:5432/metrics"
    assert d["control_keyring"] == {"kids": ["k1"], "max_age_s": 60.0, "max_skew_s": cfg.control_keyring.max_skew_s}
    assert d["kafka_security"] == "SASL_SSL PLAIN as job"
    assert d["job"] == "clicks" and d["bins"] == 256
    unsigned = _cfg(db_url="::not a url::").to_dict()
    assert unsigned["control_keyring"] == "unsigned" and unsigned["db_url"] == "<unparseable>"
    assert unsigned["kafka_security"] == "PLAINTEXT (no authentication)"


def test_the_jobs_own_topics_are_created_with_their_sizes_and_limits(monkeypatch):
    calls = []
    monkeypatch.setattr(R, "create_missing_topics", lambda *a, **kw: calls.append((a, kw)))
    sec = KafkaSecurity()
    ensure_job_topics("b:9092", "clicks", 6, security=sec)
    [((bootstrap, topics), kw)] = calls
    assert bootstrap == "b:9092" and kw["security"] is sec
    assert topics == {"clicks.control": 1, "clicks.control.acks": 1, "clicks.output": 6, "clicks.dlq": 1,
                      "clicks.control.ticks": 1, "clicks.output.commits": COMMITS_PARTITIONS, "clicks.signals": 1}, \
        "control steps stay ordered on one partition"
    big = {"max.message.bytes": str(MAX_RECORD_BYTES)}
    assert kw["configs"] == {"clicks.output": big, "clicks.dlq": big, "clicks.output.commits": COMMITS_TOPIC_CONFIG}
    assert COMMITS_TOPIC_CONFIG["cleanup.policy"] == "compact", "a slot's last marker is all that must stay"
    assert tick_topic("clicks") == "clicks.control.ticks"


def test_times_are_written_in_utc_and_read_back_aware():
    at = datetime(2026, 3, 8, 10, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert iso(at) == "2026-03-08T04:30:00+00:00" and parse_iso(iso(at)) == at
    naive = datetime(2026, 3, 8, 4, 30)  # what SQLite hands back
    assert as_utc(naive) == datetime(2026, 3, 8, 4, 30, tzinfo=UTC) and as_utc(None) is None
    assert as_utc(at) is at
