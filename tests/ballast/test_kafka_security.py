"""ballast.kafka_security: one description of the Kafka client's security, from a connection's
extra, a file or BALLAST_KAFKA_CONFIG (read through ballast.options). Fast: no services (the real
SASL/SCRAM broker is tests/system/test_kafka_auth.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ballast.kafka_security import ENV_CONFIG, RECONNECT_BACKOFF_MAX_MS, KafkaConfigError, KafkaSecurity

pytestmark = pytest.mark.security
SCRAM = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
         "sasl.username": "ballast", "sasl.password": "pw-not-in-logs"}


def test_the_variable_is_the_declared_option() -> None:
    assert ENV_CONFIG == "BALLAST_KAFKA_CONFIG"


def test_from_the_environment_through_the_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_CONFIG, raising=False)
    assert KafkaSecurity.from_env().plaintext
    monkeypatch.setenv(ENV_CONFIG, json.dumps(SCRAM))
    sec = KafkaSecurity.from_env()
    assert (sec.protocol, sec.mechanism, sec.username, sec.sasl) == ("SASL_PLAINTEXT", "SCRAM-SHA-512", "ballast", True)
    assert "pw-not-in-logs" not in repr(sec) and sec.to_config() == SCRAM
    assert KafkaSecurity.from_env({ENV_CONFIG: ""}).plaintext  # a mapping stands in for the environment
    monkeypatch.setenv(ENV_CONFIG, "{not json")
    with pytest.raises(KafkaConfigError, match="BALLAST_KAFKA_CONFIG is not a JSON object"):
        KafkaSecurity.from_env()


def test_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "kafka.json"
    f.write_text(json.dumps(SCRAM))
    assert KafkaSecurity.from_file(str(f)).sasl
    with pytest.raises(KafkaConfigError, match="cannot read Kafka client properties"):
        KafkaSecurity.from_file(str(tmp_path / "missing.json"))


def test_every_client_reconnects_within_a_second_whatever_its_security() -> None:
    """kafka-python backs off up to 30 s between reconnects by default; after a broker restart a
    task's marker read (30 s) could time out on a broker that was up. The real restart is
    tests/system/test_fault_broker.py."""
    plain = KafkaSecurity.from_config({}).python_kwargs()
    assert plain == {"reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS} and RECONNECT_BACKOFF_MAX_MS <= 1000
    scram = KafkaSecurity.from_config(SCRAM).python_kwargs()
    assert scram["reconnect_backoff_max_ms"] == RECONNECT_BACKOFF_MAX_MS
    assert scram["security_protocol"] == "SASL_PLAINTEXT" and scram["sasl_plain_username"] == "ballast"
