"""A job run's configuration and the topics every job has.

`RunConfig` is what `spark_jobs.cli` builds from its flags and what `JobRunner` runs; the helpers
here name and create the job's own topics (control, acks, output, dead letters, ticks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from ballast.kafka_security import KafkaSecurity
from ballast.policy.signals import SignalConfig
from ballast.protocol import MAX_MESSAGE_BYTES, acks_topic, control_topic, signals_topic
from ballast.signing import Keyring
from ballast.topics import create_missing_topics
from spark_jobs.output import dlq_topic, output_topic
from spark_jobs.records import MAX_RECORD_BYTES
from spark_jobs.txn_output import COMMITS_PARTITIONS, TRANSACTIONAL, commits_topic


@dataclass
class RunConfig:
    """Everything a job run needs; `bins` and `operator` are fixed at the first start."""

    job: str
    input_topic: str
    checkpoint_dir: str
    bootstrap: str
    db_url: str
    operator: str = "keycount"
    bins: int = 256
    workers: int = 2  # initial worker count; on restart the logged map wins
    state_uri: str | None = None  # durable state; default <checkpoint_dir>/state
    cache_dir: str | None = None  # workers' local caches; default: each executor's own directory
    snapshot_every: int = 10  # epochs with changes between snapshots of the durable state
    trigger_ms: int = 1000
    max_offsets_per_trigger: int | None = None
    output_partitions: int = 2
    max_future_s: float = 86400.0
    starting_offsets: str = "earliest"
    fail_on_data_loss: bool = True  # Kafka retention dropping records a replay needs is an error
    max_workers: int | None = None  # the cluster's capacity in workers (default: asked from the master)
    master_ui: str | None = None  # standalone master's web UI, for its capacity (default host:8080)
    max_control_bytes: int = MAX_MESSAGE_BYTES  # a larger control record is rejected unparsed
    control_keyring: Keyring | None = None  # signed mode (ballast.signing); None = unsigned (local use)
    kafka_security: KafkaSecurity | None = None  # SASL/TLS of every Kafka client (None: BALLAST_KAFKA_CONFIG)
    db_outage_s: float = 600.0  # an epoch waits this long for an unreachable metrics DB, then fails
    kafka_outage_s: float = 300.0  # ... and this long for an unreachable broker (Spark's clients too)
    # multi-operator jobs (spark_jobs.chain): `operator` is then the operator's name in the metrics
    # DB and the control protocol, `operator_path` what to import (default: `operator`)
    operator_path: str | None = None
    output: str | None = None  # output topic (default `<job>.output`); a chain's inner operators write a hand-off
    handoff_inputs: tuple[str, ...] = ()  # input topics an upstream operator writes: deduplicated by ballast-id
    siblings: tuple[str, ...] = ()  # the job's other operators: their control steps are not ours, nor rejected
    # keyed operators: outputs in Kafka transactions, exactly once for read_committed readers
    # (spark_jobs.txn_output), or "at-least-once" (Spark's Kafka sink; readers deduplicate by ballast-id)
    output_mode: str = TRANSACTIONAL
    # each epoch's trace: its critical path logged, the trace stored by its tail
    # (spark_jobs.epoch_trace, docs/tracing.md); off only to measure what tracing costs
    trace: bool = True
    # when the job wakes its rebalance DAG (ballast.policy.signals; None: thresholds from the
    # trigger interval and the rebalance defaults)
    signal: SignalConfig | None = None
    # the driver's Prometheus endpoint on 127.0.0.1 (spark_jobs.prom_metrics); None: none, 0: a free port
    metrics_port: int | None = None
    spark_ui: bool = False  # Spark's web UI (its address goes into the heartbeat, the console links it)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def signal_config(self) -> SignalConfig:
        """This run's signal thresholds: as configured, else the defaults with the trigger as budget."""
        return self.signal or SignalConfig(budget_ms=float(self.trigger_ms or 1000))

    @property
    def security(self) -> KafkaSecurity:
        return self.kafka_security if self.kafka_security is not None else KafkaSecurity.from_env()

    @property
    def path(self) -> str:
        """What `get_operator` imports."""
        return self.operator_path or self.operator

    @property
    def input_topics(self) -> list[str]:
        """`input_topic` may list several topics, comma-separated (a join's inputs)."""
        return [t.strip() for t in self.input_topic.split(",") if t.strip()]

    @property
    def output_topic(self) -> str:
        return self.output or output_topic(self.job)

    @property
    def state_location(self) -> str:
        return self.state_uri or f"{self.checkpoint_dir.rstrip('/')}/state"

    def to_dict(self) -> dict[str, Any]:
        """For logs and the jobs table: the DB password is masked."""
        from sqlalchemy.engine import make_url

        d = asdict(self)
        kr = self.control_keyring  # never the secrets: key ids and limits only
        d["control_keyring"] = ({"kids": kr.kids, "max_age_s": kr.max_age_s, "max_skew_s": kr.max_skew_s}
                                if kr else "unsigned")
        d["kafka_security"] = self.security.describe()  # never the password
        try:
            d["db_url"] = make_url(self.db_url).render_as_string(hide_password=True)
        except Exception:
            d["db_url"] = "<unparseable>"
        return d


def tick_topic(job: str) -> str:
    """Where the job sends itself ticks: not `<job>.control`, which only the controller may write."""
    return f"{control_topic(job)}.ticks"


def ensure_job_topics(bootstrap: str, job: str, output_partitions: int, security: KafkaSecurity | None = None) -> None:
    """Create `<job>.control` (1 partition: steps stay ordered), acks (1), output (N), the
    dead-letter topic (1), the ticks topic (1), the signals topic (1) and the output's commit-marker topic (compacted,
    one partition per task slot: spark_jobs.txn_output) if missing; output and dead letters take
    records up to MAX_RECORD_BYTES (spark_jobs.records)."""
    big = {"max.message.bytes": str(MAX_RECORD_BYTES)}
    out = output_topic(job)
    create_missing_topics(bootstrap, {control_topic(job): 1, acks_topic(job): 1, out: output_partitions,
                                      dlq_topic(job): 1, tick_topic(job): 1, commits_topic(out): COMMITS_PARTITIONS,
                                      signals_topic(job): 1},
                          security=security,
                          configs={out: big, dlq_topic(job): big, commits_topic(out): COMMITS_TOPIC_CONFIG})


#: the marker topic keeps the last marker per slot (compacted) and rolls segments hourly so the
#: compaction can drop the older ones
COMMITS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000"}




def iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat()


def parse_iso(s: str) -> datetime:
    return datetime.fromisoformat(s)


def as_utc(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


def read_topics(topics: list[str], sources: tuple[int, ...] | None, operator: str) -> list[str]:
    """The input topics an operator reads: its declared `sources` (positions in `topics`), else all."""
    if sources is None:
        return list(topics)
    bad = [i for i in sources if i >= len(topics)]
    if bad:
        raise ValueError(f"operator {operator} reads input position(s) {bad}, but --input-topic lists {len(topics)} "
                         f"topic(s): {','.join(topics)}; give it every topic its query names")
    return [t for i, t in enumerate(topics) if i in sources]
