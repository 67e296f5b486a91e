"""Signed control messages, pure: sign, verify, reject with a reason (milliseconds, no Spark/Airflow)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from ballast.errors import BallastError
from ballast.protocol import ControlStep, Move
from ballast.signing import ALG, KeyConfigError, Keyring, SigningKey, canonical, load_keyring, sign, signed_step
from spark_jobs.control import ControlRecord, decide
from spark_jobs.control_state import initial_state

pytestmark = pytest.mark.security

NOW = datetime(2030, 1, 1, tzinfo=UTC)
K1 = SigningKey.of("k1", "first-secret-0123456789")
K2 = SigningKey.of("k2", "second-secret-0123456789")
RING = Keyring({"k1": K1.secret, "k2": K2.secret}, max_age_s=300)


def _step(job="j", plan="p", issued=NOW, step=1, steps=1, version=0, moves=((0, 0, 1),)) -> ControlStep:
    return ControlStep(job=job, operator="keycount", plan_id=plan, step=step, steps=steps, kind="moves",
                       moves=tuple(Move(*m) for m in moves), workers=2, map_version=version, issued_at=issued,
                       effective_at=issued)


def _decide(values, now=NOW, ring=RING, st=None):
    recs = [ControlRecord(f"0:{i}", v) for i, v in enumerate(values)]
    return decide(st or initial_state(8, 2), recs, epoch=1, now=now, job="j", operator="keycount",
                  max_future_s=3600, keyring=ring)


def test_canonical_form_is_sorted_compact_and_excludes_sig():
    doc = {"b": 1, "a": [1, {"d": "é", "c": None}], "sig": {"kid": "x"}}
    assert canonical(doc) == b'{"a":[1,{"c":null,"d":"\\u00e9"}],"b":1}'


def test_signed_step_is_applied_with_either_active_key():
    d = _decide([signed_step(_step(steps=2), K1),
                 signed_step(_step(step=2, steps=2, version=1, moves=((1, 1, 0),)), K2)])
    assert [(e.action, e.step) for e in d.entries] == [("apply", 1), ("queue", 2)]
    sig = json.loads(signed_step(_step(), K1))["sig"]
    assert sig["kid"] == "k1" and sig["alg"] == ALG and len(base64.b64decode(sig["mac"])) == 32


def _tamper(raw: bytes, **changes) -> bytes:
    doc = json.loads(raw)
    doc.update(changes)
    return json.dumps(doc).encode()


SIGNED = signed_step(_step(), K1)
OTHER_KEY = SigningKey.of("k1", "not-the-real-secret-xx")
REJECTS = {
    "unsigned": (_step().to_json(), "unsigned control message"),
    "forged (wrong secret, same kid)": (signed_step(_step(), OTHER_KEY), "forged or altered"),
    "altered after signing": (_tamper(SIGNED, map_version=5), "forged or altered"),
    "moves altered": (_tamper(SIGNED, moves=[{"bin": 3, "from": 1, "to": 0}]), "forged or altered"),
    "unknown kid": (signed_step(_step(), SigningKey.of("k9", "first-secret-0123456789")), "unknown key id 'k9'"),
    "wrong alg": (_tamper(SIGNED, sig={**json.loads(SIGNED)["sig"], "alg": "none"}), "alg 'none'"),
    "mac not base64": (_tamper(SIGNED, sig={**json.loads(SIGNED)["sig"], "mac": "!!"}), "not base64"),
    "sig not an object": (_tamper(SIGNED, sig=[1, 2]), "'sig' must be an object"),
    "NaN in a signed body": (SIGNED[:-1] + b', "x": NaN}', "cannot canonicalize"),
}


@pytest.mark.parametrize("name", sorted(REJECTS))
def test_unauthenticated_messages_are_events_and_change_nothing(name):
    raw, why = REJECTS[name]
    st = initial_state(8, 2)
    d = _decide([raw], st=st)
    [e] = d.entries
    assert e.action == "reject" and e.event and not e.checkpoint, e
    assert e.reason.startswith("rejected signature: ") and why in e.reason, e.reason
    assert d.state_after.to_dict() == st.to_dict()
    assert "secret" not in e.reason


def test_a_forged_step_cannot_block_the_genuine_one():
    d = _decide([signed_step(_step(), OTHER_KEY), signed_step(_step(), K1)])
    assert [e.action for e in d.entries] == ["reject", "apply"]


def test_replayed_from_another_job_fails_the_signed_job_name():
    d = _decide([signed_step(_step(job="other-job"), K1)])
    [e] = d.entries
    assert e.event and not e.checkpoint and "signed for other-job/keycount" in e.reason
    assert "replayed from another job" in e.reason


def test_expired_and_future_messages_are_rejected_with_a_checkpoint():
    old = _decide([signed_step(_step(issued=NOW - timedelta(seconds=301)), K1)])
    [e] = old.entries
    assert e.action == "reject" and e.checkpoint and "expired" in e.reason and "key id k1" in e.reason
    ahead = _decide([signed_step(_step(issued=NOW + timedelta(seconds=120)), K1)])
    assert "in the future" in ahead.entries[0].reason and ahead.applied is None
    ok = _decide([signed_step(_step(issued=NOW - timedelta(seconds=299)), K1)])
    assert ok.applied is not None


def test_unsigned_mode_ignores_sig_blocks():
    d = _decide([_step().to_json()], ring=None)
    assert d.applied is not None


def test_keys_from_file_and_env_and_their_errors(tmp_path):
    f = tmp_path / "keys.json"
    f.write_text(json.dumps({"k1": "first-secret-0123456789", "k2": "base64:" + base64.b64encode(b"x" * 32).decode()}))
    ring = load_keyring(str(f), env={})
    assert ring is not None and ring.kids == ["k1", "k2"] and ring.keys["k2"] == b"x" * 32
    assert load_keyring(None, env={"BALLAST_CONTROL_KEYS": json.dumps({"a": "0123456789abcdef"})}).kids == ["a"]
    assert load_keyring(None, env={}) is None
    assert "first-secret" not in repr(ring) and "first-secret" not in repr(K1)
    for bad, why in [("[]", "non-empty JSON object"), ('{"k": "short"}', "shorter than 16"),
                     ('{"bad kid!": "0123456789abcdef"}', "key id"), ("nope", "not JSON")]:
        with pytest.raises(KeyConfigError, match=why):
            load_keyring(None, env={"BALLAST_CONTROL_KEYS": bad})
    env_key = SigningKey.from_env({"BALLAST_CONTROL_SIGNING_KEY": json.dumps({"kid": "k1",
                                                                              "secret": "first-secret-0123456789"})})
    assert env_key == K1


def test_without_a_mapping_the_keys_come_through_the_options(monkeypatch):
    """The process environment is read by ballast.options, as every other knob (an empty value is unset)."""
    monkeypatch.setenv("BALLAST_CONTROL_KEYS", json.dumps({"a": "0123456789abcdef"}))
    monkeypatch.setenv("BALLAST_CONTROL_SIGNING_KEY", json.dumps({"kid": "k1", "secret": "first-secret-0123456789"}))
    assert load_keyring(None).kids == ["a"] and SigningKey.from_env() == K1
    monkeypatch.setenv("BALLAST_CONTROL_KEYS", "")
    monkeypatch.delenv("BALLAST_CONTROL_SIGNING_KEY")
    assert load_keyring(None) is None and SigningKey.from_env() is None
    monkeypatch.setenv("BALLAST_PG_PORT", "fifty")  # a bad knob anywhere is named, not skipped
    with pytest.raises(BallastError, match="BALLAST_PG_PORT='fifty'"):
        load_keyring(None)


def test_sign_replaces_an_existing_sig():
    doc = sign(sign(_step().to_dict(), K2), K1)
    assert doc["sig"]["kid"] == "k1" and RING.authenticate(doc) == "k1"


def test_at_most_eight_key_ids_are_active_at_once():
    from ballast.signing import MAX_ACTIVE_KEYS, KeyConfigError, Keyring

    keys = {f"k{i}": bytes([65 + i]) * 32 for i in range(MAX_ACTIVE_KEYS + 1)}
    assert MAX_ACTIVE_KEYS == 8
    assert len(Keyring(dict(list(keys.items())[:8])).kids) == 8
    with pytest.raises(KeyConfigError, match="at most 8 active keys"):
        Keyring(keys)
