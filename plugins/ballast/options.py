"""Every environment knob of Ballast, declared once: name, type, default, variable, meaning.

Why one module: the same variable used to be read (with its own default) in up to five places, and
only a few were documented. Code reads `settings().<field>`; README's configuration table is
generated from `Settings` (`python -m ballast.options_doc --write`) and a test keeps them equal, and
another test fails when code reads a `BALLAST_*` variable that is not declared here.

Per-job knobs live in the jobs file (`ballast.config`); the names both share (strategy, order,
emission mode, move mode, launcher) are the `Literal`s here or in the policy. Framework-free: no
Airflow, no Spark (the data plane imports it too). `settings()` looks at the environment on every
call, so a test's or a task's environment change is seen; it is cheap.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from ballast.errors import BallastError
from ballast.policy.guards import DEFAULT_MAX_WORKERS
from ballast.policy.movemodes import MOVE_MODES, MoveMode
from ballast.policy.plan import ORDERS, STRATEGIES, Order, Strategy

REPO = Path(__file__).resolve().parents[2]
ENV_PREFIX = "BALLAST_"

EmitMode = Literal["flow-control", "prepared-ahead"]
EMIT_MODES: tuple[EmitMode, ...] = ("flow-control", "prepared-ahead")
Launcher = Literal["cli", "spark-submit"]
LAUNCHERS: tuple[Launcher, ...] = ("cli", "spark-submit")
KafkaAuth = Literal["none", "scram"]
ControlSigning = Literal["none", "hmac"]

__all__ = [
    "DEFAULT_MAX_WORKERS",
    "EMIT_MODES",
    "ENV_PREFIX",
    "LAUNCHERS",
    "MOVE_MODES",
    "ORDERS",
    "REPO",
    "STRATEGIES",
    "ConfigError",
    "ControlSigning",
    "EmitMode",
    "KafkaAuth",
    "Launcher",
    "MoveMode",
    "Order",
    "Settings",
    "Strategy",
    "env_var",
    "settings",
]


class ConfigError(BallastError, ValueError):
    """A knob has a bad value; the message names where it came from and what is allowed."""


class Settings(BaseSettings):
    """The environment knobs. Field order is the README table's order."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="ignore", frozen=True)

    # where things live
    state_dir: Path = Field(default=REPO / ".state", description="services' data, Airflow home, checkpoints, logs")
    cache_dir: Path = Field(
        default=REPO / ".cache", description="downloads (Kafka, Spark's Kafka connector jars) and built wheels"
    )
    build_cache: Path = Field(
        default=Path.home() / ".cache" / "ballast",
        description="builds kept across checkouts of this machine (the S3 server's binary), outside the checkout; "
        "`make setup` copies from it instead of building again",
    )
    jobs_file: Path = Field(default=REPO / "dags" / "ballast_jobs.yaml", description="the jobs file (docs/airflow.md)")
    venv: Path = Field(default=REPO / ".venv", description="virtualenv `make setup` creates and installs into")
    # services the control and data plane talk to
    db_url: str | None = Field(
        default=None,
        description="metrics DB, any SQLAlchemy URL (e.g. `postgresql+psycopg2://…`); "
        "unset: `sqlite:///<state_dir>/metrics.db`",
    )
    kafka_ui_url: str | None = Field(
        default=None, description="a Kafka UI's page of one topic, `{topic}` in it (e.g. "
        "`http://kafka-ui:8080/ui/clusters/local/all-topics/{topic}`): the console links each job's topics there"
    )
    kafka_bootstrap: str = Field(
        default="127.0.0.1:9092",
        description="Kafka bootstrap servers when no `ballast_kafka` "
        "connection is defined (and the jobs' `--bootstrap`)",
    )
    kafka_config: str | None = Field(
        default=None, description="JSON of Kafka client security properties (SASL/TLS); unset: PLAINTEXT"
    )
    control_keys: str | None = Field(
        default=None,
        description="job side: JSON `{kid: secret}` of accepted control keys; unset: unsigned control messages",
    )
    control_signing_key: str | None = Field(
        default=None,
        description='controller side without Airflow: JSON `{"kid": …, "secret": …}` that signs control steps',
    )
    submit: str | None = Field(
        default=None,
        description="internal: the spark-submit request the supervisor hands to `ballast.launch` (JSON, no secrets)",
    )
    # the local stack (scripts/stack.py, `make up`)
    kafka_port: int = Field(default=9092, description="local broker's client port (127.0.0.1)")
    kafka_controller_port: int = Field(default=9093, description="local broker's KRaft controller port")
    kafka_auth: KafkaAuth | None = Field(
        default=None,
        description="local broker's client auth (`none` | `scram`); "
        "unset: the mode its data was formatted in, else `scram` (SASL/SCRAM + ACLs)",
    )
    control_signing: ControlSigning | None = Field(
        default=None,
        description="local stack's control messages (`none` | `hmac`); unset: `hmac`, signed with a key "
        "generated into `<state_dir>/secrets/` at the first `make up`",
    )
    airflow_port: int = Field(default=8080, description="Airflow UI/API port")
    airflow_password: str = Field(default="ballast", description="admin password of the local Airflow")
    pg_port: int = Field(
        default=15432,
        description="port of the local PostgreSQL (`make up postgres`, the tests); keep it below the kernel's "
        "ephemeral range (32768-60999), where any outgoing connection may take it",
    )
    jwt_secret: str = Field(
        default="change-me-in-production", description="docker compose only: Airflow API's JWT secret"
    )
    # Spark
    spark_master: str = Field(
        default="local[2]", validation_alias="SPARK_MASTER", description="Spark master for jobs and tests"
    )
    driver_memory: str = Field(default="2g", description="`spark.driver.memory` of the jobs' sessions")
    driver_host: str | None = Field(
        default=None,
        description="driver address executors connect to; unset: 127.0.0.1 for "
        "`local[*]` masters, else Spark's default",
    )
    shuffle_partitions: int = Field(default=4, ge=1, description="`spark.sql.shuffle.partitions`")
    spark_log_level: str = Field(default="WARN", description="log level of the SparkContext")
    spark_daemon_memory: str = Field(
        default="512m", description="memory of the local standalone cluster's master and workers"
    )
    spark_cluster: str | None = Field(
        default=None,
        description="internal: tag that marks the processes of one local standalone cluster (scripts/spark_cluster.py)",
    )
    cache_map_bytes: int = Field(
        default=1 << 30, ge=1 << 20, description="initial LMDB map size of a worker's state cache"
    )
    cache_max_map_bytes: int = Field(
        default=1 << 40, ge=1 << 20, description="LMDB map size a worker's cache may grow to"
    )
    storage_outage_s: float = Field(
        default=300.0, ge=0, description="how long a read or write of an object store (s3://, gs://, ...) "
        "waits through an unreachable server before it fails (as --kafka-outage-s, --db-outage-s do)"
    )
    s3_port: int = Field(
        default=8014, description="port of the local S3-compatible server (`python scripts/stack.py up s3`: s3s-fs)"
    )
    # logs, tests, demo
    log_level: str = Field(default="INFO", description="log level of the data-plane CLI")
    bench_value_bytes: int = Field(
        default=1024, ge=8, description="bench only: bytes per key of the spike experiment's state (bench/padded.py)"
    )
    bench_window_ms: int = Field(
        default=20_000, ge=1000, description="bench only: the window length of the handover experiment's operator "
        "(bench/padded_windows.py)"
    )
    bench_smoke_dir: Path | None = Field(
        default=None, description="tests: a finished `bench.run --smoke` result dir that tests/bench/test_smoke.py "
        "checks instead of starting a run (tests/helpers/bench_smoke.py)"
    )
    bench_row_us: float = Field(
        default=300.0, ge=0, description="bench: CPU µs per record of bench.slow_ops.SlowKeyCount (the autotune "
        "experiment sets it in its jobs' environment)"
    )
    faults_file: Path | None = Field(
        default=None, description="tests: file of `<point> <n>` lines, the n-th pass of a fault point kills the process"
    )
    faults_kill_group: bool = Field(
        default=False, description="tests: a fault kills the whole process group, not just the process"
    )
    ui_shots: Path | None = Field(default=None, description="tests: also copy the console screenshots here")
    demo_rate: float = Field(default=20000.0, gt=0, description="records/s the demo's load generator sends")

    def metrics_db_url(self) -> str:
        """`db_url`, else the SQLite file under the state dir (so a laptop needs no DB server)."""
        return self.db_url or f"sqlite:///{self.state_dir / 'metrics.db'}"

    def jobs_state_dir(self, job: str) -> Path:
        """<state_dir>/jobs/<job>: the job's pid file, logs and default checkpoint dir."""
        return self.state_dir / "jobs" / job


def env_var(name: str) -> str:
    """The environment variable of field `name` (its alias, else BALLAST_<NAME>)."""
    alias = Settings.model_fields[name].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + name.upper()


_ENV_VARS = tuple(env_var(n) for n in Settings.model_fields)
_BUILT: dict[tuple[str | None, ...], Settings] = {}


def settings() -> Settings:
    """The knobs from the current environment; a bad value raises ConfigError naming the variable.

    Built once per distinct set of values (building costs milliseconds; looking the variables up,
    microseconds), so hot paths such as the fault points may call it freely."""
    key = tuple(os.environ.get(v) for v in _ENV_VARS)
    built = _BUILT.get(key)
    if built is None:
        if len(_BUILT) >= 64:  # tests change the environment often; keep the memo small
            _BUILT.clear()
        built = _BUILT[key] = _build()
    return built


def _build() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            var = env_var(field) if field in Settings.model_fields else field
            problems.append(f"{var}={err.get('input')!r}: {err['msg']}")
        raise ConfigError("bad environment: " + "; ".join(problems) + " (fix or unset the variable)") from None
