"""The compose deployment's secrets, made on its first start and kept after: the `secrets-init` service.

Secure by default, as `make up`: Kafka with SASL/SCRAM + ACLs (principals `admin`, `controller`,
`job`) and signed control messages. Nothing secret is in the repository: this script (stdlib only)
writes random passwords and a signing key into the `ballast-secrets` volume once, each file 0600 in
a 0700 directory owned by the one container user that reads it:

    kafka/users.env            ADMIN_/CONTROLLER_/JOB_PASSWORD       (the broker formats its SCRAM users)
    kafka/admin.properties     client properties of `admin`          (topic and ACL set-up, health check)
    airflow/connections.json   ballast_kafka (controller), ballast_kafka_job (job), ballast_control_signing,
                               ballast_kafka_watch (the signals watchers: controller, group ballast-watch)
                               (Airflow's LocalFilesystemBackend reads it)
    airflow/control-keys.json  {kid: secret} the jobs verify with    (`--control-keys` in docker/jobs.yaml)

Re-running changes nothing (a file present is kept), so a restart keeps the keys the running jobs know.
`python docker/secrets_init.py ROOT [--kafka-owner UID:GID] [--airflow-owner UID:GID]`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

USERS = ("admin", "controller", "job")
BOOTSTRAP = "kafka:9092"
MECHANISM = "SCRAM-SHA-256"
WATCH_GROUP = "ballast-watch"  # as scripts/stack_airflow.py and docker/kafka-init.sh


def _write_once(path: Path, text: str) -> bool:
    """`text` into `path` (0600 from the start) unless it exists; True when written."""
    if path.exists():
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return True


def _client(user: str, password: str) -> dict[str, str]:
    """Client properties in the Kafka provider's connection-extra format (ballast.kafka_security)."""
    return {"bootstrap.servers": BOOTSTRAP, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM,
            "sasl.username": user, "sasl.password": password}


def make(root: Path) -> list[str]:
    """Create what is missing under `root`; returns the files written (names only, never contents)."""
    kafka, airflow = root / "kafka", root / "airflow"
    for d in (root, kafka, airflow):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o700 if d != root else 0o755)
    written: list[str] = []
    users_env = kafka / "users.env"
    if _write_once(users_env, "".join(f"{u.upper()}_PASSWORD={secrets.token_urlsafe(24)}\n" for u in USERS)):
        written.append(str(users_env))
    pw = dict(line.split("=", 1) for line in users_env.read_text().split())
    password = {u: pw[f"{u.upper()}_PASSWORD"] for u in USERS}
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            f'username="admin" password="{password["admin"]}";')
    if _write_once(kafka / "admin.properties", f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={MECHANISM}\n"
                                               f"sasl.jaas.config={jaas}\n"):
        written.append(str(kafka / "admin.properties"))
    keys = airflow / "control-keys.json"
    if _write_once(keys, json.dumps({f"compose-{datetime.now(UTC):%Y%m%d}-{secrets.token_hex(4)}":
                                     "base64:" + base64.b64encode(secrets.token_bytes(32)).decode()})):
        written.append(str(keys))
    ((kid, secret),) = json.loads(keys.read_text()).items()
    conns = {
        "ballast_kafka": {"conn_type": "kafka", "extra_dejson": _client("controller", password["controller"])},
        "ballast_kafka_job": {"conn_type": "kafka", "extra_dejson": _client("job", password["job"])},
        "ballast_control_signing": {"conn_type": "generic", "login": kid, "password": secret},
        # the rebalance DAGs' asset watchers on <job>.signals: the consumer's whole config
        "ballast_kafka_watch": {"conn_type": "kafka", "extra_dejson": {
            **_client("controller", password["controller"]), "group.id": WATCH_GROUP, "auto.offset.reset": "latest"}},
    }
    path = airflow / "connections.json"
    if _write_once(path, json.dumps(conns, indent=2)):
        written.append(str(path))
    else:  # a deployment made before a connection existed gets the ones it lacks, the rest kept
        have = json.loads(path.read_text())
        if set(conns) - set(have):
            path.unlink()
            _write_once(path, json.dumps({**conns, **have}, indent=2))
            written.append(str(path))
    return written


def _chown(path: Path, owner: str | None) -> None:
    if owner is None:
        return
    uid, gid = (int(x) for x in owner.split(":"))
    for p in [path, *path.iterdir()]:
        os.chown(p, uid, gid)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path)
    ap.add_argument("--kafka-owner", help="UID:GID of the broker's user (apache/kafka: 1000:1000)")
    ap.add_argument("--airflow-owner", help="UID:GID of Airflow's user (50000:0)")
    args = ap.parse_args(argv)
    written = make(args.root)
    _chown(args.root / "kafka", args.kafka_owner)
    _chown(args.root / "airflow", args.airflow_owner)
    print("secrets-init: " + (f"made {', '.join(written)}" if written else f"kept the secrets under {args.root}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
