"""The job runner: one Structured Streaming query over the input topic AND `<job>.control`.

Per epoch (foreachBatch), in this order — each step is safe to redo when Spark replays the epoch:
 1. control records of the batch (the control topic is a second topic of the same Kafka source,
    so a replayed epoch sees exactly the same records);
 2. decide (spark_jobs.control) — or reuse the decision logged for this epoch — and log it
    durably (journal file + StepDecision rows) before touching any state;
 3. move the bins of the applied step between worker stores (spark_jobs.migrate);
 4. route the input rows to workers (`repartitionById(W, assignment[bin])`) and apply them
    (spark_jobs.worker); outputs go to `<job>.output` with ids (epoch, worker, seq);
 5. commit metrics, routing map, checkpoints, events and the heartbeat in one DB transaction,
    then echo the checkpoints on `<job>.control.acks`.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from ballast.kafka_security import KafkaSecurity
from ballast.protocol import MAX_MESSAGE_BYTES, CheckpointMessage, acks_topic, control_topic, message_key, utcnow
from ballast.signing import Keyring
from ballast.topics import create_missing_topics
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs import faults
from spark_jobs import metrics as mx
from spark_jobs.bins import bits_for, spark_columns
from spark_jobs.control import (
    ControlRecord,
    ControlState,
    EpochControl,
    decide,
    has_due_step,
    initial_state,
    tick_message,
)
from spark_jobs.durable import DurableState
from spark_jobs.executors import ExecutorScaler
from spark_jobs.journal import KEEP_EPOCHS, Journal
from spark_jobs.offsets import committed_epochs, epoch_ranges
from spark_jobs.operators import get_operator
from spark_jobs.output import dlq_topic, output_topic
from spark_jobs.processing import ProcessorOperator
from spark_jobs.timers import ClockLog, EpochClock, TimerSchedule
from spark_jobs.worker import OUTPUT_SCHEMA, ApplyConfig, make_apply_fn

log = logging.getLogger("ballast.runner")


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
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def security(self) -> KafkaSecurity:
        return self.kafka_security if self.kafka_security is not None else KafkaSecurity.from_env()

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
    dead-letter topic (1) and the ticks topic (1) if missing."""
    create_missing_topics(bootstrap, {control_topic(job): 1, acks_topic(job): 1, output_topic(job): output_partitions,
                                      dlq_topic(job): 1, tick_topic(job): 1}, security=security)


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).isoformat()


def _parse_iso(s: str) -> datetime:
    return datetime.fromisoformat(s)


def _utc(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything we store is UTC."""
    if ts is None:
        return None
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts


class StopRequested(RuntimeError):
    """Raised into a batch that began after a stop was requested."""


class JobRunner:
    """Owns one streaming query. `start()` returns at once; `stop()` ends it after the current epoch."""

    def __init__(self, spark: Any, cfg: RunConfig) -> None:
        self.spark = spark
        self.cfg = cfg
        self.k = bits_for(cfg.bins)
        self.op = get_operator(cfg.operator)
        self.journal = Journal(cfg.checkpoint_dir)
        spec = self.op.spec if isinstance(self.op, ProcessorOperator) else None
        # processors: the per-epoch clock (logged, reused on replay) and when timers come due
        self.clocks = ClockLog(self.journal.dir) if spec else None
        self.timers = TimerSchedule(spec.time_mode, spec.lateness_ms) if spec else None
        self.ctl_topic = control_topic(cfg.job)
        self.out_topic = output_topic(cfg.job)
        self.durable: DurableState | None = None
        self._last_state: dict[int, tuple[int, int]] = {}  # worker -> (keys, bytes), for epochs without tasks
        self.scaler: ExecutorScaler | None = None
        self._cache_dir: str | None = cfg.cache_dir
        self._capacity: tuple[float, int | None] = (0.0, None)
        self.started_at = utcnow()
        self.query: Any = None
        self._in_batch = threading.Event()
        self._stopping = threading.Event()
        self._last_batch_end = time.time()
        self._last_tick = 0.0
        self._state: ControlState | None = None
        self._prev_end: tuple[float, int] | None = None  # (time, sum of input end offsets)
        self._producer: Any = None
        self._consumer: Any = None
        self._lock = threading.Lock()
        self._stopper: threading.Thread | None = None
        self.epochs_done = 0
        self.last_epoch: int | None = None

    # ---------------------------------------------------------------- lifecycle --------------
    def start(self) -> Any:
        cfg = self.cfg
        fixed = {"job": cfg.job, "operator": cfg.operator, "bins": cfg.bins, "input_topic": cfg.input_topic}
        self.journal.ensure_job(fixed)
        self.durable = DurableState(cfg.state_location, cfg.job, cfg.bins, cfg.snapshot_every)
        self.durable.check_against(max(committed_epochs(self.journal.spark_checkpoint), default=-1))
        mx.ensure_job_row(cfg.db_url, cfg.job, cfg.operator, cfg.bins, cfg.to_dict(), utcnow())
        ensure_job_topics(cfg.bootstrap, cfg.job, cfg.output_partitions, cfg.security)
        self._state = self.journal.latest_state()
        self.stop_file.delete()  # a stale request must not stop this run
        if self._state is not None and self._state.workers != cfg.workers:
            log.warning("job %s restarts with the logged map (W=%d, map v%d); --workers %d is ignored",
                        cfg.job, self._state.workers, self._state.map_version, cfg.workers)
        self._cache_dir = self._default_cache_dir()
        self.scaler = ExecutorScaler(self.spark, cfg.max_workers, cfg.master_ui)
        self.scaler.scale_to(self._state.workers if self._state else cfg.workers)
        from kafka import KafkaConsumer, KafkaProducer

        kw = cfg.security.python_kwargs()
        self._producer = KafkaProducer(bootstrap_servers=cfg.bootstrap, acks="all", linger_ms=5, **kw)
        self._consumer = KafkaConsumer(bootstrap_servers=cfg.bootstrap, enable_auto_commit=False, group_id=None, **kw)
        log.info("ballast job starting with effective configuration: %s",
                 json.dumps({**cfg.to_dict(), "state_uri": self.durable.uri, "bins_bits": self.k,
                             "store_id": self.durable.store_id, "dlq_topic": dlq_topic(cfg.job),
                             "cache_dir": self._cache_dir or "<each executor's own directory>",
                             "control_topic": self.ctl_topic, "acks_topic": acks_topic(cfg.job),
                             "output_topic": self.out_topic,
                             "spark_checkpoint": str(self.journal.spark_checkpoint)}, sort_keys=True))
        if cfg.control_keyring is None:
            log.warning("control messages are NOT authenticated (unsigned mode, for local use): anyone who can "
                        "write to %s can reconfigure job %s. Give the job keys with --control-keys FILE or "
                        "BALLAST_CONTROL_KEYS (docs/operations.md, 'Signed control messages')", self.ctl_topic, cfg.job)
        else:
            log.info("control messages must be signed: key id(s) %s, max age %.0fs",
                     ", ".join(cfg.control_keyring.kids), cfg.control_keyring.max_age_s)
        reader = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            .option("subscribe", f"{cfg.input_topic},{self.ctl_topic},{tick_topic(cfg.job)}")
            .options(**self._spark_kafka_options(source=True))
            .option("startingOffsets", cfg.starting_offsets)
            .option("failOnDataLoss", "true" if cfg.fail_on_data_loss else "false")
        )
        if cfg.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
        src = reader.load()
        self._warm_up(self._state.workers if self._state else cfg.workers)
        self.query = (
            src.writeStream.queryName(f"ballast-{cfg.job}")
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(self.journal.spark_checkpoint))
            .trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
            .start()
        )
        threading.Thread(target=self._ticker, name="ballast-ticker", daemon=True).start()
        return self.query

    @property
    def stop_file(self) -> Any:
        """Touch it (`python -m spark_jobs.cli stop --checkpoint-dir D`) to stop after the current epoch.

        Under spark-submit the driver JVM is the parent process and answers SIGTERM by stopping
        the SparkContext at once; the stop file reaches the Python driver whatever launched it."""
        return self.journal.dir / "STOP"

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop after the current epoch (never in the middle of ours)."""
        self._stopping.set()
        deadline = time.time() + timeout_s
        while self._in_batch.is_set() and time.time() < deadline:
            time.sleep(0.05)
        if self.query is not None:
            self.query.stop()
        try:
            mx.set_status(self.cfg.db_url, self.cfg.job, self.cfg.operator, "stopped", utcnow())
        except Exception:  # the DB being away must not turn a clean stop into a crash
            log.exception("could not record the stopped status")
        for c in (self._producer, self._consumer):
            try:
                if c is not None:
                    c.close()
            except Exception:
                pass
        log.info("job %s stopped after epoch %s", self.cfg.job, self.last_epoch)

    def request_stop(self) -> None:
        """Signal-safe: ask a helper thread to stop the query after the current epoch."""
        if not self._stopping.is_set():
            self._stopping.set()
            try:
                mx.set_status(self.cfg.db_url, self.cfg.job, self.cfg.operator, "stopping", utcnow())
            except Exception:
                pass
            self._stopper = threading.Thread(target=self.stop, name="ballast-stop", daemon=True)
            self._stopper.start()

    def await_termination(self, poll_s: float = 1.0) -> None:
        while self.query is not None and self.query.isActive:
            self.query.awaitTermination(poll_s)
        if self._stopper is not None:
            self._stopper.join(timeout=60)
        exc = self.query.exception() if self.query is not None else None
        if exc is not None and not (self._stopping.is_set() and "StopRequested" in str(exc)):
            raise RuntimeError(f"streaming query failed: {exc}")

    def _ticker(self) -> None:
        """Queued steps that came due need an epoch even when no data arrives: send a tick record
        to our own control topic (in-band, so replays stay exact)."""
        period = max(self.cfg.trigger_ms / 1000.0, 0.5)
        while not self._stopping.is_set() and (self.query is None or self.query.isActive):
            time.sleep(0.25)
            if self.stop_file.exists():
                log.info("stop file %s found: stopping after the current epoch", self.stop_file)
                self.request_stop()
                return
            st = self._state
            now = time.time()
            timers_due = (self.timers is not None and self.durable is not None and self.timers.tick_due(
                int(now * 1000), self.durable.event_max_before(1 << 62)))
            if st is None or not (st.queue or timers_due) or self._in_batch.is_set():
                continue
            if now - self._last_batch_end < period or self._last_tick > self._last_batch_end:
                continue
            if timers_due or has_due_step(st, utcnow()):
                try:
                    self._producer.send(tick_topic(self.cfg.job), key=message_key(self.cfg.job, self.cfg.operator),
                                        value=tick_message(self.cfg.job, self.cfg.operator, utcnow())).get(timeout=10)
                    self._last_tick = now
                except Exception:
                    log.exception("tick failed")

    # ---------------------------------------------------------------- one epoch -------------
    def _offset_ranges(self, epoch: int) -> dict[str, dict[int, tuple[int, int]]] | None:
        """{topic: {partition: (start, end)}} of this epoch, from Spark's offset log (no Spark job)."""
        return epoch_ranges(self.journal.spark_checkpoint, epoch, self._earliest)

    def _earliest(self, topic: str, p: int) -> int:
        from kafka import TopicPartition

        tp = TopicPartition(topic, p)
        return int(self._kafka("offset lookups", self._consumer.beginning_offsets, [tp])[tp])

    def _batch(self, df: Any, epoch: int) -> None:
        if self._stopping.is_set():
            # a batch that started while we stop: touch nothing; Spark does not commit it and a
            # restart runs it again (stop() interrupting our Python code mid-epoch is worse)
            raise StopRequested(f"job {self.cfg.job} is stopping; epoch {epoch} left for the next run")
        self._in_batch.set()
        try:
            with self._lock:
                self._run_epoch(df, epoch)
        finally:
            self._last_batch_end = time.time()
            self._in_batch.clear()

    def _run_epoch(self, df: Any, epoch: int) -> None:
        from pyspark.sql import functions as F

        cfg = self.cfg
        t0 = time.perf_counter()
        started_at = utcnow()
        ranges = self._offset_ranges(epoch)
        cached = False
        if ranges is None:  # offset log unreadable: count with Spark (one extra job)
            df = df.persist()
            cached = True
            counts = {r["topic"]: r["n"] for r in df.groupBy("topic").agg(F.count("*").alias("n")).collect()}
            input_rows, control_rows = counts.get(cfg.input_topic, 0), counts.get(self.ctl_topic, 0)
            end_offsets: dict[int, int] = {}
        else:
            input_rows = sum(e - s for s, e in ranges.get(cfg.input_topic, {}).values())
            control_rows = sum(e - s for s, e in ranges.get(self.ctl_topic, {}).values())
            end_offsets = {p: e for p, (_, e) in ranges.get(cfg.input_topic, {}).items()}
        records: list[ControlRecord] = []
        if control_rows:
            if not cached:
                df = df.persist()
                cached = True
            rows = df.where(F.col("topic") == self.ctl_topic).select("partition", "offset", "value").collect()
            records = [ControlRecord(f"{r['partition']}:{r['offset']}", r["value"])
                       for r in sorted(rows, key=lambda r: (r["partition"], r["offset"]))]

        # 2) decision: reuse the logged one on replay
        decision = self.journal.load_decision(epoch)
        replay = decision is not None
        if decision is None:
            before = self.journal.state_before(epoch) or initial_state(cfg.bins, cfg.workers)
            decision = decide(before, records, epoch=epoch, now=started_at, job=cfg.job, operator=cfg.operator,
                              bins=cfg.bins, max_future_s=cfg.max_future_s, max_message_bytes=cfg.max_control_bytes,
                              keyring=cfg.control_keyring)
            if records or decision.entries or before.queue or self.journal.latest_state() is None:
                self.journal.write_decision(decision)
        if decision.entries:  # also on replay: a crash may have come between the file and the rows
            self._db("the decision log", mx.write_step_decisions, cfg.db_url, cfg.job, cfg.operator, epoch,
                     decision.entries)
        faults.hit("after_decision")
        st = decision.state_after
        self._state = st

        # 3+4) route and apply; bins move on the executors (the new owner's task loads them from
        # the durable state, pre-copied ones only replay the changes since they were warmed)
        applied = decision.applied
        moving_in: dict[int, tuple[int, ...]] = {}
        for b, _src, dst in (applied["moves"] if applied else []):
            moving_in[dst] = moving_in.get(dst, ()) + (b,)
        warm = {int(w): tuple(bs) for w, bs in decision.warm.items()}
        worker_docs: list[dict[str, Any]] | None = None
        moves_doc: dict[str, Any] | None = None
        clock = None
        if self.clocks is not None and self.durable is not None and self.timers is not None:
            clock = self.clocks.for_epoch(epoch, self.durable.event_max_before(epoch), self.timers.lateness_ms)
        if input_rows or moving_in or warm or (clock and self.timers and self.timers.epoch_needs_tasks(clock)):
            worker_docs = self._apply(df, epoch, st, moving_in, warm, clock)
            moves_doc = _moves_doc(applied, worker_docs) if applied and applied["moves"] else None
        if cached:
            df.unpersist()
        faults.hit("after_apply")
        t_apply = time.perf_counter()

        # 5) metrics, routing map, checkpoints, events, heartbeat: one DB transaction
        worker_docs = self._worker_metrics(st.workers, worker_docs)
        backlog, rate, end_now = self._backlog(end_offsets)
        ended_at = utcnow()
        batch_ms = (time.perf_counter() - t0) * 1000
        acks = self._db("the epoch's commit", self._commit_db, epoch, decision, moves_doc, worker_docs, started_at,
                        ended_at, batch_ms, input_rows, control_rows, backlog, rate, end_now)
        t_db = time.perf_counter()
        faults.hit("before_acks")
        self._kafka("the acks", self._send_acks, acks)
        log.debug("epoch %d phases: pre-apply+apply %.0f ms, db %.0f ms, acks %.0f ms", epoch,
                  (t_apply - t0) * 1000, (t_db - t_apply) * 1000, (time.perf_counter() - t_db) * 1000)
        self.journal.gc(epoch)
        if self.clocks is not None:
            self.clocks.gc(epoch - KEEP_EPOCHS)
        self.epochs_done += 1
        self.last_epoch = epoch
        self._log_epoch(epoch, decision, moves_doc, input_rows, batch_ms, backlog, replay, worker_docs)

    def _apply(self, df: Any, epoch: int, st: ControlState, moving_in: dict[int, tuple[int, ...]],
               warm: dict[int, tuple[int, ...]], clock: EpochClock | None = None) -> list[dict[str, Any]]:
        """One Spark job: W tasks (more while a pre-copy warms a worker that does not exist yet),
        then the durable commit of the epoch (manifest). Returns the tasks' metrics."""
        from pyspark.sql import functions as F

        cfg, durable = self.cfg, self.durable
        assert durable is not None
        durable.record_map(st.map_version, st.assignment)
        tasks = max([st.workers] + [w + 1 for w in warm])
        if self.scaler is not None:
            self.scaler.scale_to(tasks)
        snapshot = durable.snapshot_due(epoch)
        src = df.where(F.col("topic") == cfg.input_topic)
        keyed = self.op.keyed(src)
        acfg = ApplyConfig(
            epoch=epoch, job=cfg.job, operator=cfg.operator, bins_bits=self.k, workers=tasks,
            assignment=tuple(st.assignment), state_uri=durable.uri, store_id=durable.store_id,
            history=durable.history(before=epoch), output_topic=self.out_topic, dlq_topic=dlq_topic(cfg.job),
            input_topic=cfg.input_topic, cache_dir=self._cache_dir, snapshot=snapshot, warm=warm, moving_in=moving_in,
            clock=clock, op_conf=self.op.task_conf() if isinstance(self.op, ProcessorOperator) else {})
        h, b, w = spark_columns("key", self.k, st.assignment)
        routed = keyed.select("key", "value", "partition", "offset", h.alias("h"), b.alias("bin"), w.alias("worker"))
        out = routed.repartitionById(tasks, "worker").mapInArrow(make_apply_fn(acfg), OUTPUT_SCHEMA)
        out.write.format("kafka").option("kafka.bootstrap.servers", cfg.bootstrap).options(
            **self._spark_kafka_options(source=False)).save()
        faults.hit("before_manifest")
        docs = durable.commit_epoch(epoch, st.map_version, tasks, snapshot)
        if self.timers is not None:
            self.timers.update([d for d in docs if int(d.get("worker", 0)) < st.workers])
        dropped = durable.retain()
        if dropped:
            log.info("retention: dropped %d old epochs of durable state", dropped)
        return docs

    def _db(self, what: str, fn: Any, *args: Any) -> Any:
        """A metrics-DB write of the epoch (idempotent: insert-once rows, replaced metrics, one
        transaction). While the DB is unreachable the epoch waits and retries — it pauses, it
        never skips or doubles a step — for up to `db_outage_s`, then fails (a restart replays it)."""
        from migrations_db.db import is_unreachable

        return self._retry("metrics DB", what, self.cfg.db_outage_s, is_unreachable, fn, *args)

    def _kafka(self, what: str, fn: Any, *args: Any) -> Any:
        """A call of the job's own Kafka clients in the epoch (acks: re-sent acks are harmless;
        offsets: a read). While the broker is away the epoch waits up to `kafka_outage_s`."""
        from kafka.errors import KafkaError

        return self._retry("Kafka broker", what, self.cfg.kafka_outage_s, lambda e: isinstance(e, KafkaError), fn,
                           *args)

    def _retry(self, service: str, what: str, budget_s: float, transient: Any, fn: Any, *args: Any) -> Any:
        deadline, delay, since = time.time() + budget_s, 1.0, time.time()
        while True:
            try:
                out = fn(*args)
                if time.time() - since > 1.5:
                    log.warning("%s reachable again: %s done after %.0fs", service, what, time.time() - since)
                return out
            except Exception as exc:
                if not transient(exc) or time.time() > deadline or self._stopping.is_set():
                    raise
                log.warning("%s unreachable while writing %s (%s); the epoch waits and retries in %.0fs",
                            service, what, str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__, delay)
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _spark_kafka_options(self, source: bool) -> dict[str, str]:
        """Spark's Kafka clients: the job's SASL/TLS settings, and timeouts that ride out a broker
        outage of up to `kafka_outage_s` (defaults: 60 s for an offset lookup, then the query fails)."""
        ms = str(int(self.cfg.kafka_outage_s * 1000))
        opts = {**self.cfg.security.spark_options(), "kafka.default.api.timeout.ms": ms}
        if not source:
            opts.update({"kafka.max.block.ms": ms, "kafka.delivery.timeout.ms": ms,
                         "kafka.request.timeout.ms": "30000"})
        return opts

    def _worker_metrics(self, workers: int, docs: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The tasks' metrics; for an epoch without tasks, zero records and the last known state size."""
        if docs is not None:
            docs = [d for d in docs if int(d.get("worker", 0)) < workers]
            for d in docs:
                self._last_state[int(d["worker"])] = (int(d["state_keys"]), int(d["state_bytes"]))
            return docs
        out = []
        for w in range(workers):
            keys, nbytes = self._last_state.get(w, (0, 0))
            out.append({"worker": w, "records_in": 0, "records_out": 0, "dead_letters": 0, "useful_ms": 0.0,
                        "wall_ms": 0.0, "state_keys": keys, "state_bytes": nbytes, "bins": {}})
        return out

    def _backlog(self, end_offsets: dict[int, int]) -> tuple[int | None, float | None, dict[str, int]]:
        from kafka import TopicPartition

        try:
            parts = self._consumer.partitions_for_topic(self.cfg.input_topic) or set()
            tps = [TopicPartition(self.cfg.input_topic, p) for p in sorted(parts)]
            latest = self._consumer.end_offsets(tps)
        except Exception:
            log.exception("could not read end offsets of %s", self.cfg.input_topic)
            return None, None, {}
        now = time.time()
        total = sum(latest.values())
        backlog = sum(max(latest[tp] - end_offsets.get(tp.partition, 0), 0) for tp in tps) if end_offsets else None
        rate = None
        if self._prev_end is not None and now > self._prev_end[0]:
            rate = max(total - self._prev_end[1], 0) / (now - self._prev_end[0])
        self._prev_end = (now, total)
        return backlog, rate, {str(tp.partition): int(latest[tp]) for tp in tps}

    def _commit_db(self, epoch: int, d: EpochControl, moves_doc: dict[str, Any] | None,
                   worker_docs: list[dict[str, Any]],
                   started_at: datetime, ended_at: datetime, batch_ms: float, input_rows: int, control_rows: int,
                   backlog: int | None, rate: float | None, end_now: dict[str, int]) -> list[bytes]:
        cfg = self.cfg
        st = d.state_after
        decided_at = _parse_iso(d.decided_at)
        acks: list[bytes] = []
        migration_ms = float(moves_doc["ms"]) if moves_doc else 0.0
        with session_scope(cfg.db_url) as s:
            # routing map in force from this epoch (version 0 at the first epoch)
            applied = d.applied
            mx.ensure_routing_map(s, cfg.job, cfg.operator, st.map_version, epoch, st.workers, st.assignment,
                                  ended_at, applied["plan_id"] if applied else None,
                                  applied["step"] if applied else None)
            for e in d.entries:
                if e.checkpoint:
                    is_applied = e.action == "apply"
                    completed = decided_at
                    if is_applied and moves_doc:
                        completed = _parse_iso(moves_doc["completed_at"])
                    row = m.StepCheckpoint(
                        job=cfg.job, operator=cfg.operator, plan_id=e.plan_id, step=e.step,
                        status={"apply": "applied", "reject": "rejected", "supersede": "superseded"}[e.action],
                        applied_epoch=epoch if is_applied else None, applied_at=decided_at if is_applied else None,
                        completed_at=completed,
                        bins_moved=int(moves_doc["bins"]) if is_applied and moves_doc else 0,
                        keys_moved=int(moves_doc["keys"]) if is_applied and moves_doc else 0,
                        bytes_moved=int(moves_doc["bytes"]) if is_applied and moves_doc else 0,
                        migration_ms=migration_ms if is_applied else 0.0,
                        map_version_after=e.map_version_after, reason=e.reason,
                    )
                    mx.insert_checkpoint_once(s, row)
                    acks.append(self._ack(row, e.offset))
                elif e.event:
                    mx.insert_event_once(s, m.Event(
                        job=cfg.job, operator=cfg.operator, at=decided_at, level="warning",
                        kind="control_rejected", message=e.reason, epoch=epoch,
                        details={"offset": e.offset, "plan_id": e.plan_id, "step": e.step,
                                 "message_job": e.job, "message_operator": e.operator},
                    ))
                    acks.append(CheckpointMessage(
                        job=e.job, operator=e.operator, plan_id=e.plan_id, step=e.step, status="rejected",
                        applied_epoch=None, applied_at=None, completed_at=decided_at, reason=e.reason,
                        message_offset=e.offset).to_json())
                elif e.reecho:
                    done = s.get(m.StepCheckpoint, (cfg.job, cfg.operator, e.plan_id, e.step))
                    if done is not None:
                        acks.append(self._ack(done, e.offset, duplicate=True))
            wrows = []
            brows = []
            for doc in worker_docs:
                wrows.append(m.WorkerMetrics(
                    job=cfg.job, operator=cfg.operator, epoch=epoch, worker=int(doc["worker"]),
                    records_in=int(doc["records_in"]), records_out=int(doc["records_out"]),
                    useful_ms=float(doc["useful_ms"]), wall_ms=float(doc["wall_ms"]),
                    state_keys=int(doc["state_keys"]), state_bytes=int(doc["state_bytes"]),
                    dead_letters=int(doc.get("dead_letters", 0))))
                for b, (rec, keys, nbytes) in doc["bins"].items():
                    if int(doc["worker"]) != st.assignment[int(b)]:
                        log.error("migration property violated: bin %s applied by worker %s at epoch %d, map says %d",
                                  b, doc["worker"], epoch, st.assignment[int(b)])
                    brows.append({"job": cfg.job, "operator": cfg.operator, "epoch": epoch, "bin": int(b),
                                  "worker": int(doc["worker"]), "records": int(rec), "state_keys": int(keys),
                                  "state_bytes": int(nbytes)})
            erow = m.EpochMetrics(
                job=cfg.job, operator=cfg.operator, epoch=epoch, map_version=st.map_version, workers=st.workers,
                input_rows=input_rows, control_rows=control_rows, batch_ms=batch_ms, migration_ms=migration_ms,
                input_rate=rate, backlog=backlog, end_offsets=end_now or None, started_at=started_at, ended_at=ended_at,
                dead_letters=sum(int(d.get("dead_letters", 0)) for d in worker_docs))
            mx.replace_epoch_metrics(s, cfg.job, cfg.operator, epoch, erow, wrows, brows)
            mx.heartbeat(s, cfg.job, cfg.operator, epoch=epoch, map_version=st.map_version, workers=st.workers,
                         now=ended_at, started_at=self.started_at,
                         status="stopping" if self._stopping.is_set() else "running",
                         executors=self.scaler.held() if self.scaler else None, capacity=self._cluster_capacity())
        return acks

    def _warm_up(self, workers: int) -> None:
        """Before the first batch: start the Python workers (imports of pyarrow, lmdb, the job's
        modules, the operator) and open the caches, so the first epoch after a (re)start does not
        pay ~10 s for it. A failure here is only logged: the first epoch then pays the cost."""
        t0 = time.perf_counter()
        fn = _warm_fn(self.cfg.operator, self.cfg.job, self._cache_dir, self.durable.store_id if self.durable else "")
        try:
            self.spark.sparkContext.parallelize(range(workers), workers).mapPartitionsWithIndex(fn).collect()
            log.info("warmed %d Python workers and their caches in %.0f ms", workers, (time.perf_counter() - t0) * 1000)
        except Exception:
            log.warning("warm-up failed; the first epoch starts the Python workers itself", exc_info=True)

    def _default_cache_dir(self) -> str | None:
        """`--cache-dir`, else: in local mode with a local checkpoint dir, `<checkpoint>/cache`, so a
        restart finds its caches warm (they are checked against the durable state before use); on
        a cluster None = each executor's own directory."""
        if self.cfg.cache_dir:
            return self.cfg.cache_dir
        master = str(self.spark.sparkContext.master)
        if master.startswith("local") and self.journal.root.is_local:
            return f"{self.journal.root.path}/cache"
        return None

    def _cluster_capacity(self) -> int | None:
        """The cluster's capacity in workers, asked at most every 30 s."""
        at, cap = self._capacity
        if self.scaler is not None and time.time() - at > 30:
            cap = self.scaler.capacity()
            self._capacity = (time.time(), cap)
        return cap

    def _ack(self, row: m.StepCheckpoint, offset: str, duplicate: bool = False) -> bytes:
        return CheckpointMessage(
            job=row.job, operator=row.operator, plan_id=row.plan_id, step=row.step, status=row.status,  # type: ignore[arg-type]
            applied_epoch=row.applied_epoch, applied_at=_utc(row.applied_at), completed_at=_utc(row.completed_at),  # type: ignore[arg-type]
            bins_moved=row.bins_moved, keys_moved=row.keys_moved, bytes_moved=row.bytes_moved,
            migration_ms=row.migration_ms, map_version_after=row.map_version_after, reason=row.reason,
            message_offset=offset, extra={"duplicate": True} if duplicate else {},
        ).to_json()

    def _send_acks(self, acks: list[bytes]) -> None:
        if not acks:
            return
        key = message_key(self.cfg.job, self.cfg.operator)
        futures = [self._producer.send(acks_topic(self.cfg.job), key=key, value=a) for a in acks]
        self._producer.flush(timeout=30)
        for f in futures:
            f.get(timeout=30)

    def _log_epoch(self, epoch: int, d: EpochControl, moves_doc: dict[str, Any] | None, rows: int, batch_ms: float,
                   backlog: int | None, replay: bool, worker_docs: list[dict[str, Any]]) -> None:
        st = d.state_after
        acts: dict[str, list[str]] = {}
        for e in d.entries:
            acts.setdefault(e.action, []).append(f"{e.plan_id or '?'}#{e.step}")
        steps = " ".join(f"{a}={','.join(v)}" for a, v in acts.items()) or "none"
        moved = (f" moved {moves_doc['bins']} bins/{moves_doc['keys']} keys/{moves_doc['bytes']} B "
                 f"in {moves_doc['ms']:.0f} ms" if moves_doc else "")
        useful = max((float(w["useful_ms"]) for w in worker_docs), default=0.0)
        log.info("epoch %d%s: rows=%d W=%d map=v%d steps: %s%s; batch %.0f ms (max worker useful %.0f ms) "
                 "backlog=%s queued=%d", epoch, " (replay)" if replay else "", rows, st.workers, st.map_version,
                 steps, moved, batch_ms, useful, backlog, len(st.queue))


def _warm_fn(operator: str, job: str, cache_dir: str | None, store_id: str) -> Any:
    def warm(index: int, _rows: Any) -> Any:
        import lmdb  # noqa: F401
        import pyarrow  # noqa: F401
        import pyarrow.compute  # noqa: F401

        from spark_jobs import worker  # noqa: F401
        from spark_jobs.cache import WorkerCache, default_cache_root
        from spark_jobs.operators import get_operator

        get_operator(operator)
        if store_id:
            WorkerCache(cache_dir or default_cache_root(job), store_id, job, index).close()
        yield index

    return warm


def _moves_doc(applied: dict[str, Any], docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Stats of the applied step's moves, from the receiving tasks' reports (they did the work,
    in parallel: the migration time is the slowest receiver's)."""
    per_bin = []
    per_worker_ms: dict[int, float] = {}
    moving = {int(b): (int(src), int(dst)) for b, src, dst in applied["moves"]}
    for d in docs:
        for b, info in (d.get("moved_in") or {}).items():
            if int(b) in moving:
                src, dst = moving[int(b)]
                per_bin.append({"bin": int(b), "from": src, "to": dst, **info})
                per_worker_ms[dst] = per_worker_ms.get(dst, 0.0) + float(info["ms"])
    return {"bins": len(moving), "keys": sum(int(p["keys"]) for p in per_bin),
            "bytes": sum(int(p["bytes"]) for p in per_bin), "ms": max(per_worker_ms.values(), default=0.0),
            "per_bin": sorted(per_bin, key=lambda p: p["bin"]), "completed_at": _iso(utcnow())}


def start_job(spark: Any, cfg: RunConfig) -> JobRunner:
    """Start a job in this process (tests, notebooks); call `.stop()` on the result to end it."""
    runner = JobRunner(spark, cfg)
    runner.start()
    return runner
