"""Local services of the Ballast stack: Kafka (KRaft), Airflow standalone, PostgreSQL (optional).

`python scripts/stack.py up|down|status|clean [kafka|airflow|postgres|jobs ...]` — what
`make up/down/status/clean` call (`down` also stops the Spark jobs launched under the state
dir). Every service listens on 127.0.0.1 only, keeps its data under
`.state/` (ignored; PostgreSQL run as root: see PG_DIR), writes a pid file, and is health-checked
before `up` returns. Re-running `up` on a healthy service is a no-op; `down` stops only what this
script started; `clean` is `down` plus removing the data kept outside `.state/`. The tests import
this module to bring up the broker themselves (tests/conftest.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from ballast.errors import BallastError
from ballast.options import settings

REPO = Path(__file__).resolve().parent.parent
_OPTS = settings()
STATE = _OPTS.state_dir
CACHE = _OPTS.cache_dir
HOST = "127.0.0.1"
KAFKA_PORT = _OPTS.kafka_port
KAFKA_CONTROLLER_PORT = _OPTS.kafka_controller_port
AIRFLOW_PORT = _OPTS.airflow_port
PG_PORT = _OPTS.pg_port
ADMIN_USER, ADMIN_PASSWORD = "admin", _OPTS.airflow_password


class StackError(BallastError, RuntimeError):
    """A service could not be brought up; the message says what to do."""


def log(msg: str) -> None:
    print(f"[ballast-stack] {msg}", flush=True)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for services and tests on their own ports)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    try:  # started by this very process (tests): an exited child is a zombie until reaped
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    except ChildProcessError:  # not our child (`make up` ran in another process): kill(0) said enough
        pass
    return pid


def _spawn(cmd: list[str], logfile: Path, pidfile: Path, env: dict[str, str] | None = None) -> int:
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env or os.environ.copy(), start_new_session=True, cwd=REPO,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def _stop(name: str, pidfile: Path, timeout: float = 30.0, sig: int = signal.SIGTERM) -> None:
    pid = _pid_alive(pidfile)
    if pid is None:
        log(f"{name}: not running")
        pidfile.unlink(missing_ok=True)
        return
    os.killpg(pid, sig)
    deadline = time.time() + timeout
    while time.time() < deadline and _pid_alive(pidfile):
        time.sleep(0.3)
    if _pid_alive(pidfile):
        log(f"{name}: did not stop in {timeout:.0f}s, killing")
        os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    log(f"{name}: stopped")


def _wait(check, what: str, timeout: float, logfile: Path, pidfile: Path) -> None:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        if not _pid_alive(pidfile):
            tail = logfile.read_text(errors="replace")[-3000:] if logfile.exists() else ""
            raise StackError(f"{what} exited during start-up; last log lines ({logfile}):\n{tail}")
        time.sleep(0.5)
    raise StackError(f"{what} did not become healthy within {timeout:.0f}s; see {logfile}")


def _need_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("Java is missing: install a JDK 17+ (Debian: apt-get install -y openjdk-17-jre-headless)")
    return java


# ---------------------------------------------------------------- Kafka (single-node KRaft) --
# BALLAST_KAFKA_AUTH=scram (`make up` option): SASL/SCRAM-SHA-256 on the client listener, the
# StandardAuthorizer with ACLs (nothing is allowed without one), three principals with passwords
# generated at the first format (<state>/kafka/scram-users.json, 0600): `admin` (super user: the
# stack and the tests), `controller` (writes <job>.control), `job` (writes acks, outputs, DLQ).
# Default: PLAINTEXT on loopback, no authentication.
SCRAM_USERS = ("admin", "controller", "job")


class KafkaBroker:
    """One single-node KRaft broker under `root`, on `port` (+ `controller_port`)."""

    def __init__(self, root: Path, port: int, controller_port: int, auth: str = "none", name: str = "kafka") -> None:
        if auth not in ("none", "scram"):
            raise StackError(f"BALLAST_KAFKA_AUTH={auth!r}: use 'none' (default) or 'scram'")
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

            self.dir.mkdir(parents=True, exist_ok=True)
            self.users_file.write_text(json.dumps({u: secrets.token_urlsafe(18) for u in SCRAM_USERS}))
            self.users_file.chmod(0o600)
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
        return _pid_alive(self.pidfile) is not None

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
        java = _need_java()
        for port in (self.port, self.controller_port):
            if port_open(port):
                raise StackError(
                    f"port {port} on {HOST} is taken by another process: stop it, or set "
                    "BALLAST_KAFKA_PORT / BALLAST_KAFKA_CONTROLLER_PORT to free ports"
                )
        cp = _kafka_classpath()
        data = self.dir / "data"
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
        jvm = [java, "-Xms256m", "-Xmx768m", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
        mode = self.dir / "auth-mode"
        if (data / "meta.properties").exists() and mode.exists() and mode.read_text().strip() != self.auth:
            raise StackError(f"the broker's data under {data} was formatted with BALLAST_KAFKA_AUTH="
                             f"{mode.read_text().strip()}, not {self.auth}: `make clean` (drops its topics) or "
                             "start it in that mode")
        if not (data / "meta.properties").exists():
            import base64

            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            scram = []
            for user, pw in self.passwords().items():
                scram += ["--add-scram", f"SCRAM-SHA-256=[name={user},password={pw}]"]
            out = subprocess.run(
                jvm + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), "--standalone"] + scram,
                capture_output=True, text=True,
            )
            if out.returncode != 0:
                raise StackError(f"formatting Kafka storage failed:\n{out.stdout}\n{out.stderr}")
            mode.write_text(self.auth)
        auth = " with SASL/SCRAM + ACLs" if self.auth == "scram" else ""
        log(f"{self.name}: starting on {self.bootstrap}{auth} (data {data})")
        _spawn(jvm + ["kafka.Kafka", str(props)], self.logfile, self.pidfile)
        _wait(self.ready, "Kafka broker", 90, self.logfile, self.pidfile)
        log(f"{self.name}: healthy on {self.bootstrap}")

    def down(self) -> None:
        _stop(self.name, self.pidfile)

    def grant_job(self, job: str, input_topic: str) -> None:
        """ACLs of one job (SCRAM mode): `controller` may write `<job>.control` and nothing else of the
        job; `job` may read its input and control topics and write its acks, outputs, DLQ and
        ticks, never `<job>.control`. Idempotent."""
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
        topic, group = ResourceType.TOPIC, ResourceType.GROUP
        allow, deny = ACLPermissionType.ALLOW, ACLPermissionType.DENY
        ctl = f"{job}.control"
        rules = [
            ("controller", ACLOperation.WRITE, ResourcePattern(topic, ctl, lit), allow),
            ("controller", ACLOperation.CREATE, ResourcePattern(topic, ctl, lit), allow),
            ("controller", ACLOperation.CREATE, ResourcePattern(topic, f"{ctl}.acks", lit), allow),
            ("controller", ACLOperation.READ, ResourcePattern(topic, f"{ctl}.acks", lit), allow),
            ("job", ACLOperation.READ, ResourcePattern(topic, input_topic, lit), allow),
            ("job", ACLOperation.READ, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.WRITE, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.CREATE, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.DESCRIBE_CONFIGS, ResourcePattern(topic, f"{job}.", pre), allow),
            ("job", ACLOperation.WRITE, ResourcePattern(topic, ctl, lit), deny),  # deny wins over the prefix
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


def default_broker() -> KafkaBroker:
    """The stack's broker; its mode is BALLAST_KAFKA_AUTH, else the mode its data was formatted in."""
    mode_file = STATE / "kafka" / "auth-mode"
    auth = settings().kafka_auth or (mode_file.read_text().strip() if mode_file.exists() else "none")
    return KafkaBroker(STATE, KAFKA_PORT, KAFKA_CONTROLLER_PORT, auth)


KAFKA_DIR = STATE / "kafka"
KAFKA_PID = STATE / "kafka.pid"
KAFKA_LOG = STATE / "logs" / "kafka.log"


def kafka_bootstrap() -> str:
    return f"{HOST}:{KAFKA_PORT}"


def _kafka_classpath() -> str:
    jars = CACHE / "jars" / "kafka-broker"
    if not any(jars.glob("kafka_2.13-*.jar")):
        raise StackError(f"Kafka broker jars missing in {jars}: run `make setup` first")
    return str(jars / "*")


def _kafka_ready() -> bool:
    return default_broker().ready()


def kafka_up() -> None:
    broker = default_broker()
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
    _stop("kafka", KAFKA_PID)


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
        for desc in admin.describe_topics(list(topics)):
            name = desc.get("name") or desc.get("topic")
            want, have = topics[name], len(desc["partitions"])
            if have != want:
                raise StackError(f"topic {name} has {have} partitions, expected {want}")
    finally:
        admin.close()


# ---------------------------------------------------------------------- Airflow standalone --
AIRFLOW_HOME = STATE / "airflow"
AIRFLOW_PID = STATE / "airflow.pid"
AIRFLOW_LOG = STATE / "logs" / "airflow.log"


def airflow_env() -> dict[str, str]:
    """The environment every Airflow process of the local stack runs with."""
    env = os.environ.copy()
    env.update({
        "AIRFLOW_HOME": str(AIRFLOW_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__API__HOST": HOST,
        "AIRFLOW__API__PORT": str(AIRFLOW_PORT),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(AIRFLOW_HOME / "logs"),
        "PYSPARK_PYTHON": sys.executable,
        "BALLAST_KAFKA_BOOTSTRAP": kafka_bootstrap(),
        # standalone starts its components as `airflow ...` from PATH: make that the venv's
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    env.setdefault("BALLAST_DB_URL", f"sqlite:///{STATE / 'metrics.db'}")
    broker = default_broker()
    if broker.auth == "scram":  # the controller and the jobs it launches each get their own principal
        for conn, user in (("BALLAST_KAFKA", "controller"), ("BALLAST_KAFKA_JOB", "job")):
            env[f"AIRFLOW_CONN_{conn}"] = json.dumps({"conn_type": "kafka", "host": HOST, "port": KAFKA_PORT,
                                                      "extra": broker.client_config(user)})
    return env


def _airflow_ready() -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{AIRFLOW_PORT}/api/v2/version", timeout=3) as r:
            return r.status == 200
    except Exception:
        return False


def airflow_up() -> None:
    if _pid_alive(AIRFLOW_PID) and _airflow_ready():
        log(f"airflow: already running at http://{HOST}:{AIRFLOW_PORT} (login {ADMIN_USER} / {ADMIN_PASSWORD})")
        return
    if port_open(AIRFLOW_PORT):
        raise StackError(
            f"port {AIRFLOW_PORT} on {HOST} is taken by another process: stop it or set BALLAST_AIRFLOW_PORT"
        )
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    # a known login instead of the random one standalone would print
    (AIRFLOW_HOME / "simple_auth_manager_passwords.json.generated").write_text(
        json.dumps({ADMIN_USER: ADMIN_PASSWORD})
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    env = airflow_env()
    log(f"airflow: starting standalone (AIRFLOW_HOME={AIRFLOW_HOME})")
    _spawn([airflow, "standalone"], AIRFLOW_LOG, AIRFLOW_PID, env)
    _wait(_airflow_ready, "Airflow api-server", 240, AIRFLOW_LOG, AIRFLOW_PID)
    log(f"airflow: UI at http://{HOST}:{AIRFLOW_PORT}  login: {ADMIN_USER} / {ADMIN_PASSWORD}")


def airflow_down() -> None:
    _stop("airflow", AIRFLOW_PID, timeout=60)


# ------------------------------------------------- PostgreSQL (tests, and BALLAST_DB_URL) --
# As root, initdb/postgres run as the `postgres` user, who cannot enter a checkout under a 0700
# directory (root's home, `mktemp -d`): the cluster (data, socket) then lives in its own 0700 dir
# under postgres' /var/lib/postgresql, one per state dir so two checkouts never share a cluster.
class Postgres:
    """One throwaway PostgreSQL cluster for the state dir `root`, on `port` (installs Debian's
    postgresql when absent). As root the cluster lives under /var/lib/postgresql (see above)."""

    def __init__(self, root: Path, port: int, name: str = "postgres") -> None:
        self.root, self.port, self.name = root, port, name
        key = hashlib.sha256(f"{root.resolve()}:{name}".encode() if name != "postgres" else
                             str(root.resolve()).encode()).hexdigest()[:12]
        self.dir = Path("/var/lib/postgresql") / f"ballast-{key}" if os.geteuid() == 0 else root / name
        self.pidfile = root / f"{name}.pid"
        self.logfile = root / "logs" / f"{name}.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://ballast@{HOST}:{self.port}/ballast"

    def alive(self) -> bool:
        return _pid_alive(self.pidfile) is not None

    def up(self) -> None:
        if self.alive() and port_open(self.port):
            log(f"{self.name}: already running on {HOST}:{self.port}")
            return
        if not _pg_bin("initdb"):
            log("postgres: not installed; installing Debian's postgresql")
            subprocess.run(["apt-get", "update", "-qq"], check=False)
            res = subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], capture_output=True, text=True)
            if res.returncode != 0 or not _pg_bin("initdb"):
                raise StackError(f"could not install postgresql: {res.stderr[-500:]}")
        if port_open(self.port):
            raise StackError(f"port {self.port} is taken: stop that process or set BALLAST_PG_PORT")
        run_as: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            subprocess.run(["id", "postgres"], check=False, capture_output=True).returncode == 0 or subprocess.run(
                ["useradd", "--system", "--no-create-home", "postgres"], check=True
            )
            run_as = ["runuser", "-u", "postgres", "--"]
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        if run_as:
            subprocess.run(["chown", "-R", "postgres", str(self.dir)], check=True)
        data = self.dir / "data"
        if not (data / "PG_VERSION").exists():
            subprocess.run(run_as + [_pg_bin("initdb"), "-D", str(data), "-U", "ballast", "--auth=trust", "-E", "UTF8"],
                           check=True, capture_output=True)
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        if run_as:
            self.logfile.touch()
            subprocess.run(["chown", "postgres", str(self.logfile)], check=True)
        _spawn(run_as + [_pg_bin("postgres"), "-D", str(data), "-p", str(self.port), "-h", HOST, "-k", str(self.dir)],
               self.logfile, self.pidfile)
        _wait(lambda: port_open(self.port), "PostgreSQL", 60, self.logfile, self.pidfile)
        time.sleep(1.0)
        createdb = _pg_bin("createdb")
        res = subprocess.run([createdb, "-h", HOST, "-p", str(self.port), "-U", "ballast", "ballast"],
                             capture_output=True, text=True)
        if res.returncode != 0 and "already exists" not in res.stderr:
            raise StackError(f"createdb failed: {res.stderr}")
        log(f"{self.name}: healthy at {self.url}")

    def down(self) -> None:
        """Fast shutdown: SIGINT to the postmaster itself (SIGTERM would wait for every client to
        disconnect, and `runuser` in between turns signals into SIGTERM)."""
        try:
            os.kill(int((self.dir / "data" / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
            deadline = time.time() + 20
            while time.time() < deadline and self.alive():
                time.sleep(0.2)
        except (OSError, ValueError, IndexError):
            pass
        if not self.alive() and self.pidfile.exists():
            self.pidfile.unlink()
            log(f"{self.name}: stopped (fast shutdown)")
            return
        _stop(self.name, self.pidfile)

    def clean(self) -> None:
        """After `down`: remove the cluster, which as root lives outside the state dir."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
            log(f"{self.name}: removed {self.dir}")


def default_postgres() -> Postgres:
    return Postgres(STATE, PG_PORT)


PG_DIR = default_postgres().dir
PG_PID = STATE / "postgres.pid"
PG_LOG = STATE / "logs" / "postgres.log"


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for cand in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(cand)
    return None


def postgres_url() -> str:
    return default_postgres().url


def postgres_up() -> None:
    """Start the stack's throwaway PostgreSQL cluster (installs Debian's postgresql when absent)."""
    default_postgres().up()


def postgres_down() -> None:
    default_postgres().down()


def postgres_clean() -> None:
    """After `down`: remove the cluster, which as root lives outside `.state/`."""
    default_postgres().clean()


# ------------------------------------------------ Spark jobs launched by the supervisor --
def jobs_down() -> None:
    """Stop the jobs launched under this state dir (`<state>/jobs/<job>/driver.pid`, written by
    ballast.supervisor for ballast_supervise, the demo and the tests): by pid, never by pattern."""
    from ballast.supervisor import stop_all

    for line in stop_all(STATE) or ["jobs: none launched under " + str(STATE / "jobs")]:
        log(line)


def _jobs_running() -> list[str]:
    from ballast.supervisor import PID_FILE, launched_pid

    pid_files = sorted((STATE / "jobs").glob(f"*/{PID_FILE}"))
    return [p.parent.name for p in pid_files if launched_pid(p, p.parent.name)]


# ---------------------------------------------------------------------------------- CLI --
SERVICES = {
    "kafka": (kafka_up, kafka_down, lambda: _pid_alive(KAFKA_PID) is not None and _kafka_ready()),
    "airflow": (airflow_up, airflow_down, lambda: _pid_alive(AIRFLOW_PID) is not None and _airflow_ready()),
    "postgres": (postgres_up, postgres_down, lambda: _pid_alive(PG_PID) is not None and port_open(PG_PORT)),
    "jobs": (lambda: log("jobs: launched by ballast_supervise (or `make demo`), not by `up`"), jobs_down,
             lambda: bool(_jobs_running())),
}
# `down` stops Airflow first (its supervise DAG would relaunch a stopped job), then the jobs
# (which stop after their current epoch while Kafka and the metrics DB still answer), then the rest
DOWN_ORDER = ["airflow", "jobs", "postgres", "kafka"]
DEFAULT_UP = ["kafka", "airflow"]


def main(argv: list[str]) -> int:
    if argv[:1] == ["kafka-config"]:  # client properties of a SCRAM principal, for connections/--kafka-config
        user = argv[1] if len(argv) > 1 else "controller"
        broker = default_broker()
        if broker.auth != "scram":
            print("{}  (the broker runs PLAINTEXT: start it with BALLAST_KAFKA_AUTH=scram make up)")
            return 0
        if user not in SCRAM_USERS:
            print(f"unknown principal {user!r}; one of {SCRAM_USERS}", file=sys.stderr)
            return 2
        print(json.dumps({"bootstrap.servers": broker.bootstrap, **broker.client_config(user)}))
        return 0
    if not argv or argv[0] not in ("up", "down", "status", "clean"):
        print("usage: stack.py up|down|status|clean [kafka|airflow|postgres|jobs ...] | "
              "kafka-config [admin|controller|job]",
              file=sys.stderr)
        return 2
    action, names = argv[0], argv[1:]
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        print(f"unknown service(s) {unknown}; known: {sorted(SERVICES)}", file=sys.stderr)
        return 2
    try:
        if action == "up":
            for n in names or DEFAULT_UP:
                SERVICES[n][0]()
        elif action in ("down", "clean"):
            for n in [n for n in DOWN_ORDER if n in (names or DOWN_ORDER)]:
                SERVICES[n][1]()
                if action == "clean" and n == "postgres":
                    postgres_clean()
        else:
            bad = 0
            for n in names or list(SERVICES):
                ok = SERVICES[n][2]()
                bad += not ok and n in (names or DEFAULT_UP)
                print(f"{n:9s} {'up' if ok else 'down'}")
            return 1 if bad else 0
    except StackError as exc:
        log(f"ERROR: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
