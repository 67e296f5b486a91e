"""The local stack's Kafka broker (single-node KRaft on 127.0.0.1), its ACLs, and topic creation.

Secure by default (`make up`, `make demo`): SASL/SCRAM-SHA-256 on the client listener, the
StandardAuthorizer with ACLs (nothing is allowed without one), three principals with passwords
generated at the first format (<state>/kafka/scram-users.json, 0600, reused after): `admin` (super
user: the stack and the tests), `controller` (writes <job>.control), `job` (writes acks, outputs,
DLQ). BALLAST_KAFKA_AUTH=none opts out: PLAINTEXT on loopback, no authentication (the test
session's shared broker runs so, tests/conftest.py). A broker keeps the mode its data was
formatted in when the variable is unset.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from stack_procs import (
    CACHE,
    HOST,
    KAFKA_CONTROLLER_PORT,
    KAFKA_PORT,
    REPO,
    STATE,
    StackError,
    log,
    need_java,
    pid_alive,
    port_open,
    require_free_port,
    spawn,
    stop,
    wait_healthy,
)
from stack_secrets import write_private_once

from ballast.options import settings

SCRAM_USERS = ("admin", "controller", "job")


class KafkaBroker:
    """One single-node KRaft broker under `root`, on `port` (+ `controller_port`)."""

    def __init__(self, root: Path, port: int, controller_port: int, auth: str = "none", name: str = "kafka") -> None:
        if auth not in ("none", "scram"):
            raise StackError(f"BALLAST_KAFKA_AUTH={auth!r}: use 'scram' (default) or 'none'")
        self.root, self.port, self.controller_port, self.auth, self.name = root, port, controller_port, auth, name
        self.dir = root / name
        self.pidfile = root / f"{name}.pid"
        self.logfile = root / "logs" / f"{name}.log"

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def users_file(self) -> Path:
        return self.dir / "scram-users.json"

    def passwords(self) -> dict[str, str]:
        if self.auth != "scram":
            return {}
        if not self.users_file.exists():
            import secrets

            write_private_once(self.users_file, {u: secrets.token_urlsafe(18) for u in SCRAM_USERS})
        return json.loads(self.users_file.read_text())

    def client_config(self, user: str = "admin") -> dict[str, str]:
        """Client properties of `user` in the Kafka provider's connection-extra format ({} = PLAINTEXT)."""
        if self.auth != "scram":
            return {}
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": user, "sasl.password": self.passwords()[user]}

    def client_kwargs(self, user: str = "admin") -> dict[str, Any]:
        from ballast.kafka_security import KafkaSecurity

        return KafkaSecurity.from_config(self.client_config(user)).python_kwargs()

    def ready(self) -> bool:
        if not port_open(self.port):
            return False
        try:
            from kafka import KafkaAdminClient

            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=3000, **self.client_kwargs())
            admin.list_topics()
            admin.close()
            return True
        except Exception:  # broker still electing its controller
            return False

    def alive(self) -> bool:
        return pid_alive(self.pidfile) is not None

    def _properties(self, data: Path) -> list[str]:
        common = [
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.bootstrap.servers={HOST}:{self.controller_port}",
            "controller.listener.names=CONTROLLER", f"log.dirs={data}", "num.partitions=1",
            "auto.create.topics.enable=false", "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1", "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0", "log.retention.hours=24",
        ]
        if self.auth == "none":
            return common + [
                f"listeners=PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://{HOST}:{self.port}",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            ]
        pw = self.passwords()["admin"]
        return common + [
            f"listeners=SASL_PLAINTEXT://{HOST}:{self.port},CONTROLLER://{HOST}:{self.controller_port}",
            f"advertised.listeners=SASL_PLAINTEXT://{HOST}:{self.port}",
            "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "inter.broker.listener.name=SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
            # SCRAM credentials live in the metadata log, which the controller serves: the
            # controller listener itself authenticates with PLAIN (admin only)
            "sasl.mechanism.controller.protocol=PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
            "listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
            f'required username="admin" password="{pw}" user_admin="{pw}";',
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram."
            f'ScramLoginModule required username="admin" password="{pw}";',
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:admin",
            "allow.everyone.if.no.acl.found=false",
        ]

    def up(self) -> None:
        if self.alive() and self.ready():
            log(f"{self.name}: already running on {self.bootstrap}")
            return
        data = self.dir / "data"
        mode = self.dir / "auth-mode"
        if (data / "meta.properties").exists() and mode.exists() and mode.read_text().strip() != self.auth:
            raise StackError(f"the broker's data under {data} was formatted with BALLAST_KAFKA_AUTH="
                             f"{mode.read_text().strip()}, not {self.auth}: `make clean` (drops its topics) or "
                             "start it in that mode")
        java = need_java()
        require_free_port(self.port, "BALLAST_KAFKA_PORT")
        require_free_port(self.controller_port, "BALLAST_KAFKA_CONTROLLER_PORT")
        cp = _kafka_classpath()
        props = self.dir / "server.properties"
        self.dir.mkdir(parents=True, exist_ok=True)
        props.write_text("\n".join(self._properties(data) + [""]))
        props.chmod(0o600)
        log4j = self.dir / "log4j2.yaml"
        log4j.write_text(
            "Configuration:\n  Appenders:\n    Console:\n      name: STDOUT\n      PatternLayout:\n"
            "        Pattern: \"[%d] %p %m (%c)%n\"\n  Loggers:\n    Root:\n      level: WARN\n"
            "      AppenderRef:\n        - ref: STDOUT\n    Logger:\n      - name: kafka.server.KafkaRaftServer\n"
            "        level: INFO\n"
        )
        # the JDK's own JIT and collector (tiered C2, G1), whatever a caller's JDK_JAVA_OPTIONS says: the
        # test suite runs its short JVMs C1-only with the serial collector, a broker lives for hours
        jvm = [java, "-XX:TieredStopAtLevel=4", "-XX:-UseSerialGC", "-Xms256m", "-Xmx768m",
               f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
        if not (data / "meta.properties").exists():
            import base64

            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            scram = []
            for user, pw in self.passwords().items():
                scram += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={pw}]"]
            # `--cluster-id=`: an id starting with "-" (1 in 64 of urlsafe base64) read as an option
            out = subprocess.run(
                jvm + ["kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(props),
                       "--standalone"] + scram,
                capture_output=True, text=True,
            )
            if out.returncode != 0:
                raise StackError(f"formatting Kafka storage failed:\n{out.stdout}\n{out.stderr}")
            mode.write_text(self.auth)
        auth = " with SASL/SCRAM + ACLs" if self.auth == "scram" else ""
        log(f"{self.name}: starting on {self.bootstrap}{auth} (data {data})")
        spawn(jvm + ["kafka.Kafka", str(props)], self.logfile, self.pidfile)
        wait_healthy(self.ready, "Kafka broker", 90, self.logfile, self.pidfile)
        log(f"{self.name}: healthy on {self.bootstrap}")

    def down(self) -> None:
        stop(self.name, self.pidfile)

    def grant_job(self, job: str, input_topic: str) -> None:
        """ACLs of one job (SCRAM mode): `controller` may write `<job>.control` and nothing else of the
        job, and read (and create) `<job>.signals` in the watchers' group; `job` may read its input
        and control topics and write its acks, outputs, DLQ, ticks and signals, never
        `<job>.control`, and use the transactional ids `ballast.<job>.*` of its tasks'
        transactional output (spark_jobs.txn_output), whose marker topics it may add partitions
        to. Idempotent."""
        if self.auth != "scram":
            return
        from kafka import KafkaAdminClient
        from kafka.admin import (
            ACL,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePattern,
            ResourceType,
        )

        lit, pre = ACLResourcePatternType.LITERAL, ACLResourcePatternType.PREFIXED
        topic, group, txn = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
        allow, deny = ACLPermissionType.ALLOW, ACLPermissionType.DENY
        ctl = f"{job}.control"
        rules = [
            ("controller", ACLOperation.WRITE, ResourcePattern(topic, ctl, lit), allow),
            ("controller", ACLOperation.CREATE, ResourcePattern(topic, ctl, lit), allow),
            ("controller", ACLOperation.CREATE, ResourcePattern(topic, f"{ctl}.acks", lit), allow),
            ("controller", ACLOperation.READ, ResourcePattern(topic, f"{ctl}.acks", lit), allow),
            # the rebalance DAG's asset watcher reads the job's signals (stack_airflow's watch connection)
            ("controller", ACLOperation.READ, ResourcePattern(topic, f"{job}.signals", lit), allow),
            ("controller", ACLOperation.CREATE, ResourcePattern(topic, f"{job}.signals", lit), allow),
            ("controller", ACLOperation.READ, ResourcePattern(group, "ballast-watch", lit), allow),
            ("job", ACLOperation.READ, ResourcePattern(topic, input_topic, lit), allow),
            ("job", ACLOperation.READ, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.WRITE, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.CREATE, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.DESCRIBE_CONFIGS, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.WRITE, ResourcePattern(topic, ctl, lit), deny),  # deny wins over the prefix
            # transactional output: the tasks' transactional ids, partitions added to `<...>.commits`
            ("job", ACLOperation.WRITE, ResourcePattern(txn, f"ballast.{job}.", pre), allow),
            ("job", ACLOperation.DESCRIBE, ResourcePattern(txn, f"ballast.{job}.", pre), allow),
            ("job", ACLOperation.ALTER, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.ALTER, ResourcePattern(topic, ctl, lit), deny),  # its one partition orders the steps
            ("job", ACLOperation.READ, ResourcePattern(group, "spark-kafka-source-", pre), allow),
        ]
        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, **self.client_kwargs("admin"))
        try:
            acls = [ACL(f"User:{u}", "*", op, perm, pat) for u, op, pat, perm in rules]
            res = admin.create_acls(acls)
            if res.get("failed"):
                raise StackError(f"creating ACLs for job {job} failed: {res['failed']}")
        finally:
            admin.close()


DEFAULT_AUTH = "scram"  # secure by default; BALLAST_KAFKA_AUTH=none opts out


def default_broker() -> KafkaBroker:
    """The stack's broker; its mode is BALLAST_KAFKA_AUTH, else the mode its data was formatted in,
    else SCRAM + ACLs."""
    mode_file = STATE / "kafka" / "auth-mode"
    auth = settings().kafka_auth or (mode_file.read_text().strip() if mode_file.exists() else DEFAULT_AUTH)
    return KafkaBroker(STATE, KAFKA_PORT, KAFKA_CONTROLLER_PORT, auth)


KAFKA_PID = STATE / "kafka.pid"


def kafka_bootstrap() -> str:
    return f"{HOST}:{KAFKA_PORT}"


def _kafka_classpath() -> str:
    jars = CACHE / "jars" / "kafka-broker"
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise StackError(f"Kafka broker jars missing in {jars}: run `make setup` first")
    return str(jars / "*")


def kafka_ready() -> bool:
    return default_broker().ready()


def kafka_up() -> None:
    broker = default_broker()
    if broker.auth == "none" and not settings().kafka_auth:
        log("kafka: WARNING this broker's data was formatted PLAINTEXT (no authentication) and keeps that mode; "
            "`make clean` and `make up` give the secure default (SASL/SCRAM + ACLs)")
    broker.up()
    if broker.auth == "scram":  # the configured jobs' ACLs (tests grant their own)
        for job, input_topic in _configured_jobs():
            broker.grant_job(job, input_topic)
            log(f"kafka: ACLs for job {job} (input {input_topic})")


def _configured_jobs() -> list[tuple[str, str]]:
    try:
        import yaml

        doc = yaml.safe_load((REPO / "dags" / "ballast_jobs.yaml").read_text()) or {}
    except Exception:
        return []
    jobs = doc.get("jobs") if isinstance(doc, dict) else None
    return [(str(j["job"]), str(j["input_topic"])) for j in (jobs or [])
            if isinstance(j, dict) and j.get("job") and j.get("input_topic")]


def kafka_down() -> None:
    stop("kafka", KAFKA_PID)


def ensure_topics(topics: dict[str, int], bootstrap: str | None = None, security: Any = None) -> None:
    """Create topics with explicit partition counts; an existing topic must have that count.

    `security`: a ballast.kafka_security.KafkaSecurity (default BALLAST_KAFKA_CONFIG, else PLAINTEXT)."""
    from kafka import KafkaAdminClient

    from ballast.kafka_security import client_kwargs
    from ballast.topics import create_missing_topics

    bootstrap = bootstrap or kafka_bootstrap()
    create_missing_topics(bootstrap, topics, security=security)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_kwargs(security))
    try:
        deadline = time.monotonic() + 15.0
        while True:
            have = {(d.get("name") or d.get("topic")): len(d.get("partitions") or [])
                    for d in admin.describe_topics(list(topics))}
            # a topic created a moment ago may be described with no partitions yet: wait for them
            pending = [t for t in topics if have.get(t, 0) == 0]
            if not pending or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        for name, want in topics.items():
            if have.get(name, 0) != want:
                raise StackError(f"topic {name} has {have.get(name, 0)} partitions, expected {want}")
    finally:
        admin.close()
