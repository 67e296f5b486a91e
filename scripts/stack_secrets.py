"""The local stack's control-message signing key: made at the first `make up`, reused after.

Secure by default: `make up` / `make demo` sign every control step and the jobs they launch
accept only signed ones (docs/operations.md, "Signed control messages"). The key is written once
to `<state>/secrets/control-signing.json` (0600, the directory 0700, under the ignored state dir,
never committed) and read back on every later run, so a re-run keeps the key the running jobs
know. BALLAST_CONTROL_SIGNING=none opts out (unsigned steps, the job logs a warning).

Airflow gets the key twice: as connection `ballast_control_signing` (the emitter signs with it)
and as BALLAST_CONTROL_KEYS (the supervisor passes its environment to the jobs it launches).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from stack_procs import StackError

from ballast.options import settings

SIGNING_FILE = Path("secrets") / "control-signing.json"


def signing_enabled() -> bool:
    """BALLAST_CONTROL_SIGNING, unset = `hmac` (signed)."""
    return (settings().control_signing or "hmac") == "hmac"


def signing_key_file(state: Path) -> Path:
    return state / SIGNING_FILE


def ensure_signing_key(state: Path) -> dict[str, str]:
    """`{"kid", "secret"}` of the stack: read back when present, else made (32 random bytes) and
    written 0600; a re-run keeps the key the running jobs know."""
    path = signing_key_file(state)
    if path.exists():
        doc = json.loads(path.read_text())
        if isinstance(doc, dict) and isinstance(doc.get("kid"), str) and isinstance(doc.get("secret"), str):
            return {"kid": doc["kid"], "secret": doc["secret"]}
        raise StackError(f"{path} is not {{\"kid\": ..., \"secret\": ...}}: remove it to make a new key "
                         "(and restart the jobs, which know the old one)")
    # the kid names this installation: time + random, so two stacks made in the same second differ
    write_private_once(path, {"kid": f"stack-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(4)}",
                              "secret": "base64:" + base64.b64encode(secrets.token_bytes(32)).decode()})
    return ensure_signing_key(state)


def write_private_once(path: Path, doc: object) -> None:
    """Write `doc` as JSON to `path` with mode 0600 (its directory 0700) unless it exists.

    Written to a temporary name (O_EXCL, 0600 from the start: never readable by others, even for a
    moment) and hard-linked into place, so of two runs at once one wins and both read its file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)  # left by a run that died here
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def signing_env(state: Path) -> dict[str, str]:
    """What Airflow's processes need to sign (connection) and what its jobs need to verify (keys);
    {} when signing is off."""
    if not signing_enabled():
        return {}
    key = ensure_signing_key(state)
    return {
        "AIRFLOW_CONN_BALLAST_CONTROL_SIGNING": json.dumps({"conn_type": "generic", "login": key["kid"],
                                                             "password": key["secret"]}),
        "BALLAST_CONTROL_KEYS": json.dumps({key["kid"]: key["secret"]}),
    }
