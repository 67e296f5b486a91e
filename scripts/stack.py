"""Local services of the Ballast stack: Kafka (KRaft), Airflow standalone; PostgreSQL and an S3 server (optional).

`python scripts/stack.py up|down|status|clean [kafka|airflow|postgres|s3|jobs ...]` — what
`make up/down/status/clean` call (`down` also stops the Spark jobs launched under the state
dir). Every service listens on 127.0.0.1 only, keeps its data under
`.state/` (ignored; PostgreSQL run as root: see stack_postgres), writes a pid file, and is
health-checked before `up` returns. Re-running `up` on a healthy service is a no-op; `down` stops
only what this script started; `clean` is `down` plus removing the data kept outside `.state/`.
The tests import this module to bring up the broker themselves (tests/conftest.py).

One module per service — stack_kafka, stack_airflow, stack_postgres, stack_s3, on what they share in
stack_procs — and this one wires them into the CLI; their public names are re-exported here, so
`stack.KafkaBroker`, `stack.ensure_topics`, `stack.postgres_up`... stay where callers find them.
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # the service modules beside this file,
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # however this file is loaded

from stack_airflow import (  # noqa: E402
    AIRFLOW_HOME,
    AIRFLOW_LOG,
    AIRFLOW_PID,
    airflow_down,
    airflow_env,
    airflow_ready,
    airflow_up,
)
from stack_kafka import (  # noqa: E402
    DEFAULT_AUTH,
    KAFKA_PID,
    SCRAM_USERS,
    KafkaBroker,
    default_broker,
    ensure_topics,
    kafka_bootstrap,
    kafka_down,
    kafka_ready,
    kafka_up,
)
from stack_postgres import (  # noqa: E402
    PG_PID,
    Postgres,
    default_postgres,
    postgres_clean,
    postgres_down,
    postgres_up,
    postgres_url,
)
from stack_procs import (  # noqa: E402
    ADMIN_PASSWORD,
    ADMIN_USER,
    AIRFLOW_PORT,
    CACHE,
    HOST,
    KAFKA_CONTROLLER_PORT,
    KAFKA_PORT,
    PG_PORT,
    REPO,
    STATE,
    StackError,
    free_port,
    log,
    pid_alive,
    port_open,
)
from stack_s3 import S3_PID, S3Server, default_s3, s3_clean, s3_down, s3_up  # noqa: E402
from stack_secrets import ensure_signing_key, signing_enabled, signing_key_file  # noqa: E402

__all__ = [
    "ADMIN_PASSWORD", "ADMIN_USER", "AIRFLOW_HOME", "AIRFLOW_LOG", "AIRFLOW_PID", "AIRFLOW_PORT", "CACHE",
    "DEFAULT_AUTH", "HOST",
    "KAFKA_CONTROLLER_PORT", "KAFKA_PID", "KAFKA_PORT", "PG_PID",
    "PG_PORT", "REPO", "S3_PID", "SCRAM_USERS", "STATE", "KafkaBroker", "Postgres", "S3Server", "StackError",
    "airflow_down", "default_s3", "s3_clean", "s3_down", "s3_up",
    "airflow_env", "airflow_up", "default_broker", "default_postgres", "ensure_signing_key", "ensure_topics",
    "free_port", "jobs_down",
    "kafka_bootstrap", "kafka_down", "kafka_up", "main", "port_open", "postgres_clean", "postgres_down",
    "postgres_up", "postgres_url", "signing_enabled", "signing_key_file",
]


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
    "kafka": (kafka_up, kafka_down, KAFKA_PID, kafka_ready),
    "airflow": (airflow_up, airflow_down, AIRFLOW_PID, airflow_ready),
    "postgres": (postgres_up, postgres_down, PG_PID, lambda: port_open(PG_PORT)),
    "s3": (s3_up, s3_down, S3_PID, lambda: port_open(default_s3().port)),
    "jobs": (lambda: log("jobs: launched by ballast_supervise (or `make demo`), not by `up`"), jobs_down,
             None, lambda: bool(_jobs_running())),
}
STATUS_PATIENCE_S = 30.0  # how long `status` gives a running service to answer (a loaded machine's
# Airflow API can miss a 3 s probe; a process that runs but never answers is reported as such)


def service_status(name: str, patience_s: float = STATUS_PATIENCE_S) -> str:
    """One service's line for `status` (see `probe`)."""
    _, _, pid_file, ready = SERVICES[name]
    return probe(pid_file, ready, patience_s)


def probe(pid_file: Path | None, ready: Callable[[], bool], patience_s: float) -> str:
    """'up', 'down', or 'not answering' when the process in `pid_file` runs but `ready()` stayed
    false for `patience_s` (probed every second, so a slow answer is not read as down)."""
    if pid_file is None:
        return "up" if ready() else "down"
    deadline = time.monotonic() + patience_s
    while (pid := pid_alive(pid_file)) is not None and not ready():
        if time.monotonic() >= deadline:
            return f"not answering (process {pid} runs; its log is under {STATE})"
        time.sleep(1.0)
    return "down" if pid is None else "up"


# `down` stops Airflow first (its supervise DAG would relaunch a stopped job), then the jobs
# (which stop after their current epoch while Kafka and the metrics DB still answer), then the rest
DOWN_ORDER = ["airflow", "jobs", "postgres", "s3", "kafka"]
DEFAULT_UP = ["kafka", "airflow"]


def main(argv: list[str]) -> int:
    if argv[:1] == ["kafka-config"]:  # client properties of a SCRAM principal, for connections/--kafka-config
        user = argv[1] if len(argv) > 1 else "controller"
        broker = default_broker()
        if broker.auth != "scram":
            print("{}  (the broker runs PLAINTEXT, BALLAST_KAFKA_AUTH=none: `make clean` and `make up` for SCRAM)")
            return 0
        if user not in SCRAM_USERS:
            print(f"unknown principal {user!r}; one of {SCRAM_USERS}", file=sys.stderr)
            return 2
        print(json.dumps({"bootstrap.servers": broker.bootstrap, **broker.client_config(user)}))
        return 0
    if argv[:1] == ["s3-env"]:  # shell exports that point AWS clients (and a job's --state-uri s3://) at it
        for k, v in default_s3().env().items():
            print(f"export {k}={shlex.quote(v)}")
        return 0
    if not argv or argv[0] not in ("up", "down", "status", "clean"):
        print("usage: stack.py up|down|status|clean [kafka|airflow|postgres|s3|jobs ...] | "
              "kafka-config [admin|controller|job] | s3-env",
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
                if action == "clean" and n == "s3":
                    s3_clean()
        else:
            bad = 0
            for n in names or list(SERVICES):
                state = service_status(n)
                bad += state != "up" and n in (names or DEFAULT_UP)
                print(f"{n:9s} {state}", flush=True)
            return 1 if bad else 0
    except StackError as exc:
        log(f"ERROR: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
