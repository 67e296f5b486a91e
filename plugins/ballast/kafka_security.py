"""Kafka client security (SASL/SCRAM, SASL/PLAIN, TLS) from one description, for every client we run.

The description is the Airflow Kafka provider's connection format — the client properties in the
connection's extra: `security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
`ssl.ca.location` — so one `ballast_kafka` connection configures the emitter, the job it launches
and the tests. Outside Airflow the same JSON comes from BALLAST_KAFKA_CONFIG (or the job's
`--kafka-config FILE`). Absent: PLAINTEXT, the local default.

Pure Python, no Kafka import: `python_kwargs()` feeds kafka-python (emitter, job's own producer and
consumer, tasks' transactional producers, admin), `spark_options()` Spark's Kafka source and sink
(`kafka.`-prefixed Java client properties, JAAS line included). The password is kept out of reprs and logs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ballast.errors import BallastError
from ballast.options import env_var, settings

ENV_CONFIG = env_var("kafka_config")
#: the Java client's default bound on the back-off between reconnects. kafka-python's 30 s default
#: let a client that saw a broker restart wait up to 30 s more before it tried again, longer than a
#: task's 30 s marker read: a job restarted after an outage failed on a broker that was up.
RECONNECT_BACKOFF_MAX_MS = 1000
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_JAAS = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
         "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
         "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


class KafkaConfigError(BallastError, ValueError):
    """Security settings that cannot work; the message says which field to fix."""


def _jaas_quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise KafkaConfigError(f"security.protocol {self.protocol!r} is not one of {PROTOCOLS}")
        if self.sasl:
            if self.mechanism not in MECHANISMS:
                raise KafkaConfigError(f"sasl.mechanism {self.mechanism!r} is not one of {MECHANISMS} "
                                       f"(needed with security.protocol {self.protocol})")
            if not self.username or self.password is None:
                raise KafkaConfigError(f"security.protocol {self.protocol} needs sasl.username and sasl.password")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def plaintext(self) -> bool:
        return self.protocol == "PLAINTEXT"

    @classmethod
    def from_config(cls, conf: Mapping[str, Any] | None) -> KafkaSecurity:
        """From client properties in the Kafka provider's connection-extra format (other keys ignored)."""
        conf = conf or {}
        return cls(
            protocol=str(conf.get("security.protocol") or "PLAINTEXT").upper(),
            mechanism=(str(conf.get("sasl.mechanism") or conf.get("sasl.mechanisms") or "").upper() or None),
            username=conf.get("sasl.username"), password=conf.get("sasl.password"),
            ssl_cafile=conf.get("ssl.ca.location") or conf.get("ssl.cafile"),
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KafkaSecurity:
        """BALLAST_KAFKA_CONFIG (through ballast.options; `env` stands in for the environment in tests)."""
        raw = env.get(ENV_CONFIG) if env is not None else settings().kafka_config
        if not raw:
            return cls()
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise KafkaConfigError(f"{ENV_CONFIG} is not a JSON object of Kafka client properties") from exc
        return cls.from_config(doc)

    @classmethod
    def from_file(cls, path: str) -> KafkaSecurity:
        try:
            return cls.from_config(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise KafkaConfigError(f"cannot read Kafka client properties from {path}: {exc}") from exc

    def to_config(self) -> dict[str, str]:
        """Back to client properties (what BALLAST_KAFKA_CONFIG carries to a launched job)."""
        out = {"security.protocol": self.protocol}
        if self.sasl:
            out.update({"sasl.mechanism": str(self.mechanism), "sasl.username": str(self.username),
                        "sasl.password": str(self.password)})
        if self.ssl_cafile:
            out["ssl.ca.location"] = self.ssl_cafile
        return out

    def env(self) -> dict[str, str]:
        return {} if self.plaintext else {ENV_CONFIG: json.dumps(self.to_config())}

    def python_kwargs(self) -> dict[str, Any]:
        """kafka-python KafkaProducer/KafkaConsumer/KafkaAdminClient keyword arguments: the
        security settings, and the reconnect back-off bound every client of ours shares
        (`RECONNECT_BACKOFF_MAX_MS`)."""
        kw: dict[str, Any] = {"reconnect_backoff_max_ms": RECONNECT_BACKOFF_MAX_MS}
        if self.plaintext:
            return kw
        kw["security_protocol"] = self.protocol
        if self.sasl:
            kw.update(sasl_mechanism=self.mechanism, sasl_plain_username=self.username,
                      sasl_plain_password=self.password)
        if self.ssl_cafile:
            kw["ssl_cafile"] = self.ssl_cafile
        return kw

    def spark_options(self) -> dict[str, str]:
        """Options of Spark's Kafka source and sink (`kafka.` + Java client property)."""
        if self.plaintext:
            return {}
        opts = {"kafka.security.protocol": self.protocol}
        if self.sasl:
            opts["kafka.sasl.mechanism"] = str(self.mechanism)
            opts["kafka.sasl.jaas.config"] = (f"{_JAAS[str(self.mechanism)]} required username="
                                              f"{_jaas_quote(str(self.username))} password="
                                              f"{_jaas_quote(str(self.password))};")
        if self.ssl_cafile:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = self.ssl_cafile
        return opts

    def describe(self) -> str:
        """For logs: protocol, mechanism and user, never the password."""
        if self.plaintext:
            return "PLAINTEXT (no authentication)"
        return f"{self.protocol}" + (f" {self.mechanism} as {self.username}" if self.sasl else "")


def client_kwargs(security: KafkaSecurity | None) -> dict[str, Any]:
    """kafka-python kwargs of `security`, or of BALLAST_KAFKA_CONFIG when None."""
    return (security if security is not None else KafkaSecurity.from_env()).python_kwargs()
