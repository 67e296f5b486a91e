"""The local stack's Airflow standalone (api-server, scheduler, DAG processor, triggerer) on 127.0.0.1.

It runs with this checkout's dags/ and plugins/, a known admin login, — when the broker runs
SASL/SCRAM (the default) — one Kafka connection per principal (the controller's and the jobs'),
and — unless BALLAST_CONTROL_SIGNING=none — the stack's control signing key (stack_secrets).
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from stack_kafka import default_broker, kafka_bootstrap
from stack_procs import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    AIRFLOW_PORT,
    HOST,
    KAFKA_PORT,
    REPO,
    STATE,
    log,
    pid_alive,
    require_free_port,
    spawn,
    stop,
    wait_healthy,
)
from stack_secrets import ensure_signing_key, signing_enabled, signing_env

AIRFLOW_HOME = STATE / "airflow"
AIRFLOW_PID = STATE / "airflow.pid"
AIRFLOW_LOG = STATE / "logs" / "airflow.log"
WATCH_GROUP = "ballast-watch"  # the consumer group of the signals watchers (stack_kafka.grant_job's ACLs)


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
        # the tasks reach the api-server here (Airflow's default assumes port 8080)
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://{HOST}:{AIRFLOW_PORT}/execution/",
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
    # the rebalance DAGs' asset watchers (the Kafka provider's trigger: its connection extra is the
    # consumer's whole config) read the jobs' <job>.signals as the controller, in one group
    env["AIRFLOW_CONN_BALLAST_KAFKA_WATCH"] = json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": kafka_bootstrap(), "group.id": WATCH_GROUP, "auto.offset.reset": "latest",
        **broker.client_config("controller")}})
    env.update(signing_env(STATE))  # the emitter signs, the jobs the supervisor launches verify
    return env


def airflow_ready() -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{AIRFLOW_PORT}/api/v2/version", timeout=3) as r:
            return r.status == 200
    except Exception:
        return False


def airflow_up() -> None:
    if pid_alive(AIRFLOW_PID):
        # ours is running; on a loaded machine its API can take longer than one probe to answer, so wait
        # for it instead of mistaking our own server for another process on the port
        wait_healthy(airflow_ready, "Airflow api-server (already running)", 120, AIRFLOW_LOG, AIRFLOW_PID)
        log(f"airflow: already running at http://{HOST}:{AIRFLOW_PORT} (login {ADMIN_USER} / {ADMIN_PASSWORD})")
        return
    require_free_port(AIRFLOW_PORT, "BALLAST_AIRFLOW_PORT")
    AIRFLOW_HOME.mkdir(parents=True, exist_ok=True)
    # a known login instead of the random one standalone would print
    (AIRFLOW_HOME / "simple_auth_manager_passwords.json.generated").write_text(
        json.dumps({ADMIN_USER: ADMIN_PASSWORD})
    )
    airflow = str(Path(sys.executable).parent / "airflow")
    env = airflow_env()
    signing = (f"signed with key id {ensure_signing_key(STATE)['kid']}" if signing_enabled()
               else "UNSIGNED (BALLAST_CONTROL_SIGNING=none)")
    log(f"airflow: starting standalone (AIRFLOW_HOME={AIRFLOW_HOME}); control messages {signing}")
    spawn([airflow, "standalone"], AIRFLOW_LOG, AIRFLOW_PID, env)
    wait_healthy(airflow_ready, "Airflow api-server", 240, AIRFLOW_LOG, AIRFLOW_PID)
    log(f"airflow: UI at http://{HOST}:{AIRFLOW_PORT}  login: {ADMIN_USER} / {ADMIN_PASSWORD}")


def airflow_down() -> None:
    stop("airflow", AIRFLOW_PID, timeout=60)
