"""Airflow hooks: where the broker and the metrics DB are, from Airflow connections.

Connections are the operator's knob (UI, env `AIRFLOW_CONN_BALLAST_KAFKA`, secrets backend); the
environment defaults keep a laptop setup (scripts/stack.py) working with no connection defined.
"""

from __future__ import annotations

from urllib.parse import quote

from airflow.exceptions import AirflowNotFoundException
from airflow.sdk import BaseHook

from ballast.kafka_security import KafkaSecurity
from ballast.options import settings
from ballast.signing import SigningKey


def _connection_or_none(conn_id: str):
    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None


class BallastKafkaHook(BaseHook):
    """Bootstrap servers of the broker that carries `<job>.control` (conn `ballast_kafka`).

    host[:port] of the connection; a comma-separated list in `host` or `extra.bootstrap_servers`
    (or the Kafka provider's `extra["bootstrap.servers"]`) for several brokers. Absent connection:
    BALLAST_KAFKA_BOOTSTRAP, else 127.0.0.1:9092.

    SASL/TLS (`security()`): the Kafka provider's connection format, client properties in extra —
    {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username":
    "...", "sasl.password": "..."}; `login`/`password` of the connection stand in for the last two.
    Absent connection: BALLAST_KAFKA_CONFIG (same JSON), else PLAINTEXT.
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "ballast_kafka"
    conn_type = "ballast_kafka"
    hook_name = "Ballast Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.kafka_conn_id = kafka_conn_id

    def bootstrap(self) -> str:
        conn = _connection_or_none(self.kafka_conn_id)
        if conn is None:
            return settings().kafka_bootstrap
        extra = conn.extra_dejson or {}
        if extra.get("bootstrap_servers") or extra.get("bootstrap.servers"):
            return str(extra.get("bootstrap_servers") or extra["bootstrap.servers"])
        if not conn.host:
            raise ValueError(f"connection {self.kafka_conn_id!r} has no host: set host and port of a broker")
        return f"{conn.host}:{conn.port}" if conn.port and "," not in conn.host else conn.host

    def security(self) -> KafkaSecurity:
        conn = _connection_or_none(self.kafka_conn_id)
        if conn is None:
            return KafkaSecurity.from_env()
        props = dict(conn.extra_dejson or {})
        if str(props.get("security.protocol", "")).upper().startswith("SASL_"):
            props.setdefault("sasl.username", conn.login)
            props.setdefault("sasl.password", conn.password)
        return KafkaSecurity.from_config(props)

    def get_conn(self) -> str:
        return self.bootstrap()


class BallastSigningHook(BaseHook):
    """The key the controller signs control steps with (conn `ballast_control_signing`).

    login = key id, password = secret (at least 16 bytes; `base64:...` for binary), so the secret
    can live in any secrets backend Airflow reads connections from. Absent connection:
    BALLAST_CONTROL_SIGNING_KEY ('{"kid": ..., "secret": ...}'), else None = unsigned steps.
    """

    conn_name_attr = "signing_conn_id"
    default_conn_name = "ballast_control_signing"
    conn_type = "ballast_control_signing"
    hook_name = "Ballast control signing key"

    def __init__(self, signing_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.signing_conn_id = signing_conn_id

    def signing_key(self) -> SigningKey | None:
        conn = _connection_or_none(self.signing_conn_id)
        if conn is None:
            return SigningKey.from_env()
        if not conn.login or not conn.password:
            raise ValueError(f"connection {self.signing_conn_id!r} needs login = key id and password = secret")
        return SigningKey.of(conn.login, conn.password)

    def get_conn(self) -> SigningKey | None:
        return self.signing_key()


class BallastMetricsDbHook(BaseHook):
    """SQLAlchemy URL of the metrics DB (conn `ballast_metrics_db`).

    `extra.sqlalchemy_url` wins; else the URL is built from the connection (sqlite: host = file
    path; postgres: postgresql+psycopg2://login:password@host:port/schema). Absent connection:
    BALLAST_DB_URL, else the repo's .state/metrics.db (ballast.store.schema.default_url()).
    """

    conn_name_attr = "db_conn_id"
    default_conn_name = "ballast_metrics_db"
    conn_type = "ballast_metrics_db"
    hook_name = "Ballast metrics DB"

    def __init__(self, db_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.db_conn_id = db_conn_id

    def url(self) -> str:
        conn = _connection_or_none(self.db_conn_id)
        if conn is None:
            from ballast.store.schema import default_url

            return default_url()
        extra = conn.extra_dejson or {}
        if extra.get("sqlalchemy_url"):
            return str(extra["sqlalchemy_url"])
        ctype = (conn.conn_type or "").lower()
        if ctype == "sqlite":
            return f"sqlite:///{conn.host or conn.schema}"
        if ctype in ("postgres", "postgresql"):
            auth = ""
            if conn.login:
                auth = quote(conn.login, safe="") + (f":{quote(conn.password, safe='')}" if conn.password else "") + "@"
            port = f":{conn.port}" if conn.port else ""
            return f"postgresql+psycopg2://{auth}{conn.host}{port}/{conn.schema or 'ballast'}"
        raise ValueError(
            f"connection {self.db_conn_id!r} has type {conn.conn_type!r}; use sqlite or postgres, or put the "
            "URL in extra as {\"sqlalchemy_url\": \"...\"}"
        )

    def get_conn(self) -> str:
        return self.url()


def airflow_base() -> str:
    """Path of the Airflow UI root ("" unless the api-server runs under a base_url path): the
    console's links into Airflow and the task links back to the console start with it."""
    try:
        from urllib.parse import urlparse

        from airflow.configuration import conf

        return urlparse(conf.get("api", "base_url", fallback="/") or "/").path.rstrip("/")
    except Exception:
        return ""


def console_plan_url(plan_id: str) -> str:
    """The console page of one plan (its job selected, the plan pinned)."""
    return f"{airflow_base()}/ballast/?plan={quote(plan_id, safe='')}"

