"""Local services of the Ballast stack: Kafka (KRaft), Airflow standalone, PostgreSQL (optional).

`python scripts/stack.py up|down|status|clean [kafka|airflow|postgres ...]` — what
`make up/down/status/clean` call. Every service listens on 127.0.0.1 only, keeps its data under
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

REPO = Path(__file__).resolve().parent.parent
STATE = Path(os.environ.get("BALLAST_STATE_DIR", REPO / ".state"))
CACHE = Path(os.environ.get("BALLAST_CACHE_DIR", REPO / ".cache"))
HOST = "127.0.0.1"
KAFKA_PORT = int(os.environ.get("BALLAST_KAFKA_PORT", "9092"))
KAFKA_CONTROLLER_PORT = int(os.environ.get("BALLAST_KAFKA_CONTROLLER_PORT", "9093"))
AIRFLOW_PORT = int(os.environ.get("BALLAST_AIRFLOW_PORT", "8080"))
PG_PORT = int(os.environ.get("BALLAST_PG_PORT", "55432"))
ADMIN_USER, ADMIN_PASSWORD = "admin", os.environ.get("BALLAST_AIRFLOW_PASSWORD", "ballast")


class StackError(RuntimeError):
    """A service could not be brought up; the message says what to do."""


def log(msg: str) -> None:
    print(f"[ballast-stack] {msg}", flush=True)


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None


def _spawn(cmd: list[str], logfile: Path, pidfile: Path, env: dict[str, str] | None = None) -> int:
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env or os.environ.copy(), start_new_session=True, cwd=REPO,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def _stop(name: str, pidfile: Path, timeout: float = 30.0) -> None:
    pid = _pid_alive(pidfile)
    if pid is None:
        log(f"{name}: not running")
        pidfile.unlink(missing_ok=True)
        return
    os.killpg(pid, signal.SIGTERM)
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
    if not port_open(KAFKA_PORT):
        return False
    try:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap(), request_timeout_ms=3000)
        admin.list_topics()
        admin.close()
        return True
    except Exception:  # broker still electing its controller
        return False


def kafka_up() -> None:
    if _pid_alive(KAFKA_PID) and _kafka_ready():
        log(f"kafka: already running on {kafka_bootstrap()}")
        return
    java = _need_java()
    for port in (KAFKA_PORT, KAFKA_CONTROLLER_PORT):
        if port_open(port):
            raise StackError(
                f"port {port} on {HOST} is taken by another process: stop it, or set "
                "BALLAST_KAFKA_PORT / BALLAST_KAFKA_CONTROLLER_PORT to free ports"
            )
    cp = _kafka_classpath()
    data = KAFKA_DIR / "data"
    props = KAFKA_DIR / "server.properties"
    KAFKA_DIR.mkdir(parents=True, exist_ok=True)
    props.write_text(
        "\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.bootstrap.servers={HOST}:{KAFKA_CONTROLLER_PORT}",
            f"listeners=PLAINTEXT://{HOST}:{KAFKA_PORT},CONTROLLER://{HOST}:{KAFKA_CONTROLLER_PORT}",
            f"advertised.listeners=PLAINTEXT://{HOST}:{KAFKA_PORT}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={data}",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "log.retention.hours=24",
            "",
        ])
    )
    log4j = KAFKA_DIR / "log4j2.yaml"
    log4j.write_text(
        "Configuration:\n  Appenders:\n    Console:\n      name: STDOUT\n      PatternLayout:\n"
        "        Pattern: \"[%d] %p %m (%c)%n\"\n  Loggers:\n    Root:\n      level: WARN\n"
        "      AppenderRef:\n        - ref: STDOUT\n    Logger:\n      - name: kafka.server.KafkaRaftServer\n"
        "        level: INFO\n"
    )
    jvm = [java, "-Xms256m", "-Xmx768m", f"-Dlog4j2.configurationFile={log4j}", "-cp", cp]
    if not (data / "meta.properties").exists():
        cluster_id = str(uuid.uuid4())
        import base64

        cluster_id = base64.urlsafe_b64encode(uuid.UUID(cluster_id).bytes).decode().rstrip("=")
        out = subprocess.run(
            jvm + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), "--standalone"],
            capture_output=True, text=True,
        )
        if out.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{out.stdout}\n{out.stderr}")
    log(f"kafka: starting on {kafka_bootstrap()} (data {data})")
    _spawn(jvm + ["kafka.Kafka", str(props)], KAFKA_LOG, KAFKA_PID)
    _wait(_kafka_ready, "Kafka broker", 90, KAFKA_LOG, KAFKA_PID)
    log(f"kafka: healthy on {kafka_bootstrap()}")


def kafka_down() -> None:
    _stop("kafka", KAFKA_PID)


def ensure_topics(topics: dict[str, int], bootstrap: str | None = None) -> None:
    """Create topics with explicit partition counts; an existing topic must have that count."""
    from kafka import KafkaAdminClient

    from ballast.topics import create_missing_topics

    bootstrap = bootstrap or kafka_bootstrap()
    create_missing_topics(bootstrap, topics)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
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
_PG_KEY = hashlib.sha256(str(STATE.resolve()).encode()).hexdigest()[:12]
PG_DIR = Path("/var/lib/postgresql") / f"ballast-{_PG_KEY}" if os.geteuid() == 0 else STATE / "postgres"
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
    return f"postgresql+psycopg2://ballast@{HOST}:{PG_PORT}/ballast"


def postgres_up() -> None:
    """Start a throwaway PostgreSQL cluster (installs Debian's postgresql when absent)."""
    if _pid_alive(PG_PID) and port_open(PG_PORT):
        log(f"postgres: already running on {HOST}:{PG_PORT}")
        return
    if not _pg_bin("initdb"):
        log("postgres: not installed; installing Debian's postgresql")
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        res = subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], capture_output=True, text=True)
        if res.returncode != 0 or not _pg_bin("initdb"):
            raise StackError(f"could not install postgresql: {res.stderr[-500:]}")
    if port_open(PG_PORT):
        raise StackError(f"port {PG_PORT} is taken: stop that process or set BALLAST_PG_PORT")
    run_as: list[str] = []
    if os.geteuid() == 0:  # initdb and postgres refuse to run as root
        subprocess.run(["id", "postgres"], check=False, capture_output=True).returncode == 0 or subprocess.run(
            ["useradd", "--system", "--no-create-home", "postgres"], check=True
        )
        run_as = ["runuser", "-u", "postgres", "--"]
    PG_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    PG_DIR.chmod(0o700)
    if run_as:
        subprocess.run(["chown", "-R", "postgres", str(PG_DIR)], check=True)
    data = PG_DIR / "data"
    if not (data / "PG_VERSION").exists():
        subprocess.run(run_as + [_pg_bin("initdb"), "-D", str(data), "-U", "ballast", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True)
    PG_LOG.parent.mkdir(parents=True, exist_ok=True)
    if run_as:
        PG_LOG.touch()
        subprocess.run(["chown", "postgres", str(PG_LOG)], check=True)
    _spawn(run_as + [_pg_bin("postgres"), "-D", str(data), "-p", str(PG_PORT), "-h", HOST, "-k", str(PG_DIR)],
           PG_LOG, PG_PID)
    _wait(lambda: port_open(PG_PORT), "PostgreSQL", 60, PG_LOG, PG_PID)
    time.sleep(1.0)
    createdb = _pg_bin("createdb")
    res = subprocess.run([createdb, "-h", HOST, "-p", str(PG_PORT), "-U", "ballast", "ballast"],
                         capture_output=True, text=True)
    if res.returncode != 0 and "already exists" not in res.stderr:
        raise StackError(f"createdb failed: {res.stderr}")
    log(f"postgres: healthy at {postgres_url()}")


def postgres_down() -> None:
    _stop("postgres", PG_PID)


def postgres_clean() -> None:
    """After `down`: remove the cluster, which as root lives outside `.state/`."""
    if PG_DIR.exists():
        shutil.rmtree(PG_DIR)
        log(f"postgres: removed {PG_DIR}")


# ---------------------------------------------------------------------------------- CLI --
SERVICES = {
    "kafka": (kafka_up, kafka_down, lambda: _pid_alive(KAFKA_PID) is not None and _kafka_ready()),
    "airflow": (airflow_up, airflow_down, lambda: _pid_alive(AIRFLOW_PID) is not None and _airflow_ready()),
    "postgres": (postgres_up, postgres_down, lambda: _pid_alive(PG_PID) is not None and port_open(PG_PORT)),
}
DEFAULT_UP = ["kafka", "airflow"]


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("up", "down", "status", "clean"):
        print("usage: stack.py up|down|status|clean [kafka|airflow|postgres ...]", file=sys.stderr)
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
            for n in reversed(names or list(SERVICES)):
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
