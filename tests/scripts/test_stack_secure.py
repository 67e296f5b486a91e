"""Secure by default (issue 28): `make up` / `make demo` resolve to SASL/SCRAM + ACLs and signed
control messages; the keys and passwords are made at the first set-up into the state dir (0600,
reused on re-runs, git-ignored) and reach Airflow and the jobs it launches consistently. The real
broker and job in that configuration: tests/system/test_kafka_auth.py."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import ballast_stack as stack  # scripts/stack.py, loaded by tests/conftest.py
import pytest

from ballast.signing import SigningKey, load_keyring, sign

pytestmark = [pytest.mark.foundation, pytest.mark.security]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def secure_default(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No opt-out set (tests/conftest.py sets both for the suite's plaintext broker) and a fresh
    state dir in place of the stack's."""
    monkeypatch.delenv("BALLAST_KAFKA_AUTH", raising=False)
    monkeypatch.delenv("BALLAST_CONTROL_SIGNING", raising=False)
    state = tmp_path / "state"
    for mod in ("stack_kafka", "stack_airflow"):
        monkeypatch.setattr(sys.modules[mod], "STATE", state)
    return state


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_the_default_broker_is_scram_and_the_default_control_is_signed(secure_default: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    assert stack.default_broker().auth == "scram"
    assert stack.signing_enabled()
    monkeypatch.setenv("BALLAST_KAFKA_AUTH", "none")
    monkeypatch.setenv("BALLAST_CONTROL_SIGNING", "none")
    assert stack.default_broker().auth == "none" and not stack.signing_enabled()  # the documented opt-outs
    monkeypatch.delenv("BALLAST_KAFKA_AUTH")
    (secure_default / "kafka").mkdir(parents=True)
    (secure_default / "kafka" / "auth-mode").write_text("none")
    assert stack.default_broker().auth == "none", "an existing broker keeps the mode its data was formatted in"


def test_the_signing_key_is_made_once_private_and_reused(secure_default: Path) -> None:
    key = stack.ensure_signing_key(secure_default)
    path = stack.signing_key_file(secure_default)
    assert path.is_relative_to(secure_default) and _mode(path) == 0o600 and _mode(path.parent) == 0o700
    assert stack.ensure_signing_key(secure_default) == key, "a re-run keeps the key the jobs know"
    assert json.loads(path.read_text()) == key and not list(path.parent.glob(".*"))  # no temporary left
    assert len(SigningKey.of(key["kid"], key["secret"]).secret) == 32
    other = stack.ensure_signing_key(secure_default.parent / "other-state")
    assert other["secret"] != key["secret"] and other["kid"] != key["kid"], "every installation makes its own"


def test_a_damaged_key_file_is_a_clear_error_not_a_new_key(secure_default: Path) -> None:
    path = stack.signing_key_file(secure_default)
    path.parent.mkdir(parents=True)
    path.write_text("[]")
    with pytest.raises(stack.StackError, match="remove it to make a new key"):
        stack.ensure_signing_key(secure_default)


def test_scram_passwords_are_made_once_private_and_reused(secure_default: Path) -> None:
    broker = stack.default_broker()
    first = broker.passwords()
    assert set(first) == set(stack.SCRAM_USERS) and _mode(broker.users_file) == 0o600
    assert stack.default_broker().passwords() == first
    assert broker.client_config("job") == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                                           "sasl.username": "job", "sasl.password": first["job"]}


def test_airflow_gets_each_principal_and_the_key_the_jobs_verify_with(secure_default: Path) -> None:
    """What `make up` hands Airflow: the controller's and the jobs' Kafka principals, the signing
    connection, and BALLAST_CONTROL_KEYS for the jobs the supervisor launches; the key the
    controller signs with is one the jobs accept."""
    env = stack.airflow_env()
    pw = stack.default_broker().passwords()
    for conn, user in (("AIRFLOW_CONN_BALLAST_KAFKA", "controller"), ("AIRFLOW_CONN_BALLAST_KAFKA_JOB", "job")):
        extra = json.loads(env[conn])["extra"]
        assert extra["sasl.username"] == user and extra["sasl.password"] == pw[user]
    conn = json.loads(env["AIRFLOW_CONN_BALLAST_CONTROL_SIGNING"])
    signer = SigningKey.of(conn["login"], conn["password"])
    ring = load_keyring(None, env={"BALLAST_CONTROL_KEYS": env["BALLAST_CONTROL_KEYS"]})
    assert ring is not None and ring.kids == [signer.kid]
    assert ring.authenticate(sign({"job": "clicks"}, signer)) == signer.kid
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].endswith(f":{stack.AIRFLOW_PORT}/execution/")


def test_the_opt_outs_hand_airflow_no_credentials_and_no_keys(secure_default: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BALLAST_KAFKA_AUTH", "none")
    monkeypatch.setenv("BALLAST_CONTROL_SIGNING", "none")
    for var in ("AIRFLOW_CONN_BALLAST_KAFKA", "AIRFLOW_CONN_BALLAST_KAFKA_JOB", "AIRFLOW_CONN_BALLAST_CONTROL_SIGNING",
                "BALLAST_CONTROL_KEYS"):
        monkeypatch.delenv(var, raising=False)
    env = stack.airflow_env()
    assert not {"AIRFLOW_CONN_BALLAST_KAFKA", "AIRFLOW_CONN_BALLAST_CONTROL_SIGNING", "BALLAST_CONTROL_KEYS"} & set(env)
    assert not (secure_default / "secrets").exists()


def test_the_generated_secrets_are_never_committed() -> None:
    paths = [".state/secrets/control-signing.json", ".state/kafka/scram-users.json"]
    res = subprocess.run(["git", "check-ignore", *paths], cwd=REPO, capture_output=True, text=True)
    assert res.stdout.split() == paths
