"""Signed control messages (protocol v1 + `sig`): who may reconfigure a job.

The controller signs each step: HMAC-SHA256 over the message's canonical JSON (every field but
`sig`, keys sorted, no whitespace, ASCII), and adds

    "sig": {"kid": "<key id>", "alg": "HMAC-SHA256", "mac": "<base64 of the 32-byte MAC>"}

A job configured with keys (`--control-keys FILE` or `BALLAST_CONTROL_KEYS`, JSON `{kid: secret}`)
accepts a step only when its MAC matches the key named by `kid`; the signed body holds the job
and operator names (so a message replayed to another job fails that job's name check) and
`issued_at` (so an old message expires after `max_age_s`). Two kids may be active at once for
rotation. Without keys the job runs unsigned (local use) and says so in its start-up log.

Pure Python (hmac, base64, json): the emitter, the job and the tests import it; no Spark, no Airflow.
Secrets never appear in a repr, a log line or a rejection reason.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ballast.errors import BallastError
from ballast.options import env_var, settings
from ballast.protocol import ControlStep, ProtocolError, brief

ALG = "HMAC-SHA256"
SIG_FIELD = "sig"
ENV_KEYS = env_var("control_keys")  # job side: JSON {kid: secret}
ENV_SIGNING_KEY = env_var("control_signing_key")  # controller side without Airflow: JSON {"kid":..., "secret":...}
DEFAULT_MAX_AGE_S = 600.0
DEFAULT_MAX_SKEW_S = 60.0
MIN_SECRET_BYTES = 16
MAX_ACTIVE_KEYS = 8
_KID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class SignatureError(ProtocolError):
    """A message that fails authentication; `reason` is what the job records and echoes."""


class KeyConfigError(BallastError, ValueError):
    """Keys that cannot be used (bad JSON, short secret, bad key id); the message says what to fix."""


def _secret_bytes(kid: str, secret: Any) -> bytes:
    if not isinstance(secret, str):
        raise KeyConfigError(f"secret of key id {kid!r} must be a string")
    if secret.startswith("base64:"):
        try:
            raw = base64.b64decode(secret[7:], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise KeyConfigError(f"secret of key id {kid!r} is not valid base64 after 'base64:'") from exc
    else:
        raw = secret.encode("utf-8")
    if len(raw) < MIN_SECRET_BYTES:
        raise KeyConfigError(f"secret of key id {kid!r} is shorter than {MIN_SECRET_BYTES} bytes")
    return raw


def _check_kid(kid: Any) -> str:
    if not isinstance(kid, str) or not _KID.fullmatch(kid):
        raise KeyConfigError(f"key id {kid!r} must be 1-64 characters of A-Z a-z 0-9 . _ : -")
    return kid


@dataclass(frozen=True)
class SigningKey:
    """The controller's key: `kid` is sent, `secret` never is."""

    kid: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        _check_kid(self.kid)
        if len(self.secret) < MIN_SECRET_BYTES:
            raise KeyConfigError(f"secret of key id {self.kid!r} is shorter than {MIN_SECRET_BYTES} bytes")

    @classmethod
    def of(cls, kid: str, secret: str) -> SigningKey:
        return cls(_check_kid(kid), _secret_bytes(kid, secret))

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SigningKey | None:
        """BALLAST_CONTROL_SIGNING_KEY = '{"kid": "...", "secret": "..."}' (None when unset); `env`
        stands in for the environment (tests), else the variable comes through ballast.options."""
        raw = env.get(ENV_SIGNING_KEY) if env is not None else settings().control_signing_key
        if not raw:
            return None
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise KeyConfigError(f"{ENV_SIGNING_KEY} is not JSON {{\"kid\": ..., \"secret\": ...}}") from exc
        if not isinstance(doc, dict) or "kid" not in doc or "secret" not in doc:
            raise KeyConfigError(f"{ENV_SIGNING_KEY} must be a JSON object with \"kid\" and \"secret\"")
        return cls.of(doc["kid"], doc["secret"])


def canonical(doc: Mapping[str, Any]) -> bytes:
    """The signed bytes: every field but `sig`, sorted keys, no whitespace, ASCII, no NaN."""
    body = {k: v for k, v in doc.items() if k != SIG_FIELD}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def mac_of(secret: bytes, doc: Mapping[str, Any]) -> bytes:
    return hmac.new(secret, canonical(doc), hashlib.sha256).digest()


def sign(doc: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """`doc` plus its `sig` block (an existing `sig` is replaced)."""
    body = {k: v for k, v in doc.items() if k != SIG_FIELD}
    return {**body, SIG_FIELD: {"kid": key.kid, "alg": ALG, "mac": base64.b64encode(mac_of(key.secret, body)).decode()}}


def signed_step(step: ControlStep, key: SigningKey | None) -> bytes:
    """The Kafka value of `step`: signed when a key is given, plain protocol v1 otherwise."""
    if key is None:
        return step.to_json()
    return json.dumps(sign(step.to_dict(), key), sort_keys=True).encode()


@dataclass(frozen=True)
class Keyring:
    """The job's verification keys and limits. Checks only; it changes nothing."""

    keys: Mapping[str, bytes] = field(repr=False)
    max_age_s: float = DEFAULT_MAX_AGE_S
    max_skew_s: float = DEFAULT_MAX_SKEW_S

    def __post_init__(self) -> None:
        if not self.keys:
            raise KeyConfigError("a keyring needs at least one key")
        if len(self.keys) > MAX_ACTIVE_KEYS:
            raise KeyConfigError(f"at most {MAX_ACTIVE_KEYS} active keys (two are enough to rotate)")
        for kid, secret in self.keys.items():
            _check_kid(kid)
            if len(secret) < MIN_SECRET_BYTES:
                raise KeyConfigError(f"secret of key id {kid!r} is shorter than {MIN_SECRET_BYTES} bytes")

    @property
    def kids(self) -> list[str]:
        return sorted(self.keys)

    def authenticate(self, doc: Mapping[str, Any]) -> str:
        """The kid whose key made this message's MAC; raises SignatureError otherwise."""
        sig = doc.get(SIG_FIELD)
        if sig is None:
            raise SignatureError(f"unsigned control message: this job accepts only messages signed with key id(s) "
                                 f"{', '.join(self.kids)}")
        if not isinstance(sig, dict):
            raise SignatureError(f"bad signature block: 'sig' must be an object, got {type(sig).__name__}")
        kid, alg, mac = sig.get("kid"), sig.get("alg"), sig.get("mac")
        if alg != ALG:
            raise SignatureError(f"bad signature block: alg {brief(alg)} is not {ALG!r}")
        if not isinstance(kid, str) or kid not in self.keys:
            raise SignatureError(f"unknown key id {brief(kid)}: this job knows {', '.join(self.kids)}")
        if not isinstance(mac, str) or len(mac) > 128:
            raise SignatureError("bad signature block: mac must be base64 of a 32-byte HMAC-SHA256")
        try:
            got = base64.b64decode(mac, validate=True)
        except (binascii.Error, ValueError):
            raise SignatureError("bad signature block: mac is not base64") from None
        try:
            want = mac_of(self.keys[kid], doc)
        except (ValueError, TypeError, RecursionError) as exc:
            raise SignatureError(f"cannot canonicalize the message to check its MAC ({type(exc).__name__})") from None
        if len(got) != len(want) or not hmac.compare_digest(got, want):
            raise SignatureError(f"forged or altered control message: the MAC does not match key id {kid!r}")
        return kid

    def expired_reason(self, issued_at: datetime, now: datetime) -> str | None:
        """Why a message issued at `issued_at` is no longer (or not yet) acceptable at `now`."""
        age = (now - issued_at).total_seconds()
        if age > self.max_age_s:
            return (f"expired: issued at {issued_at.isoformat()}, {age:.0f}s ago, more than the "
                    f"{self.max_age_s:.0f}s a signed message is valid")
        if age < -self.max_skew_s:
            return (f"issued_at {issued_at.isoformat()} is {-age:.0f}s in the future (more than "
                    f"{self.max_skew_s:.0f}s of clock skew)")
        return None


def parse_keys(text: str, origin: str) -> dict[str, bytes]:
    """`{kid: secret}` JSON → {kid: secret bytes}; `origin` names the file or variable in errors."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise KeyConfigError(f"{origin} is not JSON: expected {{\"<key id>\": \"<secret>\", ...}}") from exc
    if not isinstance(doc, dict) or not doc:
        raise KeyConfigError(f"{origin} must be a non-empty JSON object {{\"<key id>\": \"<secret>\"}}")
    return {_check_kid(kid): _secret_bytes(kid, secret) for kid, secret in doc.items()}


def load_keyring(path: str | None = None, env: Mapping[str, str] | None = None,
                 max_age_s: float = DEFAULT_MAX_AGE_S, max_skew_s: float = DEFAULT_MAX_SKEW_S) -> Keyring | None:
    """The job's keys from `path` (wins) or BALLAST_CONTROL_KEYS (from `env` if given, else through
    ballast.options); None = unsigned mode."""
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise KeyConfigError(f"cannot read control keys file {path}: {exc}") from exc
        return Keyring(parse_keys(text, f"control keys file {path}"), max_age_s, max_skew_s)
    raw = env.get(ENV_KEYS) if env is not None else settings().control_keys
    if raw:
        return Keyring(parse_keys(raw, ENV_KEYS), max_age_s, max_skew_s)
    return None
