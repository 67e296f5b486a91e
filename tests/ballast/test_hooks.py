"""ballast.hooks: where the broker, the signing key and the metrics DB are, from Airflow connections
(host/port, a list, or extra; SASL login standing in for the SASL user), else from the environment;
a connection that cannot say where is refused with what to set. Fast: connections given as
AIRFLOW_CONN_* variables, no Airflow metadata DB (except the moved test, which migrates one)."""

from __future__ import annotations

import json

import pytest

from ballast.hooks import BallastKafkaHook, BallastMetricsDbHook, BallastSigningHook
from ballast.signing import KeyConfigError, SigningKey

pytestmark = pytest.mark.controlplane
SECRET = "s" * 20


def _conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: object) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(fields))
    return conn_id


def test_hooks_fall_back_to_environment_without_connections(airflow_db, monkeypatch):
    from ballast.hooks import BallastKafkaHook, BallastMetricsDbHook

    monkeypatch.setenv("BALLAST_KAFKA_BOOTSTRAP", "kafka.example.internal:19092")
    monkeypatch.setenv("BALLAST_DB_URL", "sqlite:////tmp/elsewhere.db")
    assert BallastKafkaHook().bootstrap() == "kafka.example.internal:19092"
    assert BallastMetricsDbHook().url() == "sqlite:////tmp/elsewhere.db"
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_KAFKA", "kafka://broker-a:9094")
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_METRICS_DB",
                       '{"conn_type": "postgres", "host": "db", "port": 5432, "login": "u", "password": "p@ss", '
                       '"schema": "m"}')
    assert BallastKafkaHook().bootstrap() == "broker-a:9094"
    assert BallastMetricsDbHook().url() == "postgresql+psycopg2://u:p%40ss@db:5432/m"



@pytest.mark.parametrize("fields, expected", [
    ({"conn_type": "kafka", "host": "b1", "port": 9094}, "b1:9094"),
    ({"conn_type": "kafka", "host": "b1"}, "b1"),
    ({"conn_type": "kafka", "host": "b1:9092,b2:9092", "port": 9094}, "b1:9092,b2:9092"),  # a list keeps its ports
    ({"conn_type": "kafka", "host": "x", "extra": {"bootstrap_servers": "e1:1,e2:2"}}, "e1:1,e2:2"),
    ({"conn_type": "kafka", "extra": {"bootstrap.servers": "p1:1"}}, "p1:1"),  # the Kafka provider's key
])
def test_bootstrap_from_the_connection(monkeypatch: pytest.MonkeyPatch, fields: dict, expected: str) -> None:
    hook = BallastKafkaHook(_conn(monkeypatch, "t_kafka_bootstrap", **fields))
    assert hook.bootstrap() == expected and hook.get_conn() == expected


def test_a_kafka_connection_without_a_broker_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = BallastKafkaHook(_conn(monkeypatch, "t_kafka_empty", conn_type="kafka"))
    with pytest.raises(ValueError, match="connection 't_kafka_empty' has no host: set host and port of a broker"):
        hook.bootstrap()


def test_sasl_settings_come_from_extra_with_the_login_standing_in(monkeypatch: pytest.MonkeyPatch) -> None:
    sasl = {"security.protocol": "sasl_plaintext", "sasl.mechanism": "SCRAM-SHA-256"}
    sec = BallastKafkaHook(_conn(monkeypatch, "t_kafka_sasl", conn_type="kafka", host="b", login="ballast",
                                 password="pw", extra=sasl)).security()
    assert (sec.protocol, sec.mechanism, sec.username, sec.password) == ("SASL_PLAINTEXT", "SCRAM-SHA-256",
                                                                        "ballast", "pw")
    own = {**sasl, "sasl.username": "svc", "sasl.password": "pw2"}  # extra's own user wins over the login
    sec = BallastKafkaHook(_conn(monkeypatch, "t_kafka_own", conn_type="kafka", host="b", login="ballast",
                                 password="pw", extra=own)).security()
    assert (sec.username, sec.password) == ("svc", "pw2")
    plain = BallastKafkaHook(_conn(monkeypatch, "t_kafka_plain", conn_type="kafka", host="b", login="ignored"))
    assert plain.security().plaintext and plain.security().username is None


def test_without_a_kafka_connection_security_is_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BALLAST_KAFKA_CONFIG", raising=False)
    assert BallastKafkaHook("t_kafka_absent").security().plaintext
    monkeypatch.setenv("BALLAST_KAFKA_CONFIG", json.dumps({"security.protocol": "SASL_PLAINTEXT",
                                                           "sasl.mechanism": "SCRAM-SHA-512",
                                                           "sasl.username": "u", "sasl.password": "p"}))
    assert BallastKafkaHook("t_kafka_absent").security().username == "u"


def test_the_signing_key_is_the_connections_else_the_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BALLAST_CONTROL_SIGNING_KEY", raising=False)
    assert BallastSigningHook("t_sign_absent").signing_key() is None  # unsigned steps
    monkeypatch.setenv("BALLAST_CONTROL_SIGNING_KEY", json.dumps({"kid": "env-1", "secret": SECRET}))
    assert BallastSigningHook("t_sign_absent").signing_key() == SigningKey.of("env-1", SECRET)
    hook = BallastSigningHook(_conn(monkeypatch, "t_sign", conn_type="generic", login="k2", password=SECRET))
    assert hook.signing_key() == SigningKey.of("k2", SECRET) and hook.get_conn() == hook.signing_key()


def test_a_signing_connection_without_key_id_and_secret_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="connection 't_sign_bad' needs login = key id and password = secret"):
        BallastSigningHook(_conn(monkeypatch, "t_sign_bad", conn_type="generic", login="k2")).signing_key()
    with pytest.raises(KeyConfigError, match="shorter than 16 bytes"):
        BallastSigningHook(_conn(monkeypatch, "t_sign_short", conn_type="generic", login="k2",
                                 password="short")).signing_key()


@pytest.mark.parametrize("fields, expected", [
    ({"conn_type": "postgres", "host": "db", "extra": {"sqlalchemy_url": "postgresql+psycopg2://x@y/z"}},
     "postgresql+psycopg2://x@y/z"),
    ({"conn_type": "sqlite", "host": "/data/metrics.db"}, "sqlite:////data/metrics.db"),
    ({"conn_type": "postgres", "host": "db"}, "postgresql+psycopg2://db/ballast"),
    ({"conn_type": "postgresql", "host": "db", "login": "u", "schema": "m"}, "postgresql+psycopg2://u@db/m"),
    ({"conn_type": "postgres", "host": "db", "port": 6432, "login": "a/b", "password": "p:w@"},
     "postgresql+psycopg2://a%2Fb:p%3Aw%40@db:6432/ballast"),
])
def test_the_metrics_db_url_from_the_connection(monkeypatch: pytest.MonkeyPatch, fields: dict, expected: str) -> None:
    hook = BallastMetricsDbHook(_conn(monkeypatch, "t_db_url", **fields))
    assert hook.url() == expected and hook.get_conn() == expected


def test_a_metrics_db_connection_of_another_type_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="has type 'mysql'; use sqlite or postgres, or put the URL in extra"):
        BallastMetricsDbHook(_conn(monkeypatch, "t_db_mysql", conn_type="mysql", host="db")).url()


def test_without_a_db_connection_the_url_is_the_environments(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("BALLAST_DB_URL", "sqlite:////tmp/elsewhere.db")
    assert BallastMetricsDbHook("t_db_absent").url() == "sqlite:////tmp/elsewhere.db"
    monkeypatch.delenv("BALLAST_DB_URL")
    monkeypatch.setenv("BALLAST_STATE_DIR", str(tmp_path))
    assert BallastMetricsDbHook("t_db_absent").url() == f"sqlite:///{tmp_path / 'metrics.db'}"
