"""The job runner: one Structured Streaming query over the input topic AND `<job>.control`.

Per epoch (foreachBatch), in this order — each step is safe to redo when Spark replays the epoch:
 1. control records of the batch: the control topic is a second topic of the same Kafka source, so
    Spark's offset log fixes which of its records an epoch covers and a replay reads the same ones
    (the driver reads them, spark_jobs.control_reader; the stream carries the input rows only,
    already through the operator's epoch-free expressions, spark_jobs.stream_plan);
 2. decide (spark_jobs.control) — or reuse the decision logged for this epoch — and log it
    durably (journal file + StepDecision rows) before touching any state;
 3. move the bins of the applied step between worker stores (spark_jobs.migrate);
 4. route the input rows to workers (`repartitionById(W, assignment[bin])`) and apply them
    (spark_jobs.worker); outputs go to `<job>.output` with ids (epoch, worker, seq);
 5. commit metrics, routing map, checkpoints, events and the heartbeat in one DB transaction,
    then echo the checkpoints on `<job>.control.acks`.

The loop is here; its configuration is spark_jobs.run_config, its DB/Kafka calls
spark_jobs.job_clients, the commit of step 5 spark_jobs.epoch_commit, the warm-up spark_jobs.warmup.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ballast.errors import BallastError
from ballast.protocol import acks_topic, control_topic, message_key, utcnow
from ballast.store import writer as mx
from ballast.store.fencing import Fenced
from ballast.topics import create_missing_topics
from spark_jobs import faults
from spark_jobs.binding import bind_state, check_job_row, job_row_config
from spark_jobs.bins import bits_for
from spark_jobs.control import (
    ControlState,
    decide,
    has_due_step,
    initial_state,
    tick_message,
)
from spark_jobs.control_reader import read_control
from spark_jobs.durable import DurableState
from spark_jobs.epoch_commit import EpochCommit, summarize_moves
from spark_jobs.epoch_times import EpochTimes, spark_outside
from spark_jobs.executors import ExecutorScaler
from spark_jobs.fencing import DriverFence
from spark_jobs.inputs import InputRows
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import KEEP_EPOCHS, Journal
from spark_jobs.operator_loader import get_operator
from spark_jobs.output import dlq_topic
from spark_jobs.processing import ProcessorOperator
from spark_jobs.run_config import COMMITS_TOPIC_CONFIG, RunConfig, ensure_job_topics, tick_topic
from spark_jobs.stateless import StatelessOperator
from spark_jobs.stream_plan import StreamPlan
from spark_jobs.timers import ClockLog, EpochClock, TimerSchedule
from spark_jobs.txn_output import (
    COMMITS_PARTITIONS,
    TRANSACTIONAL,
    TxnTarget,
    commits_topic,
    ensure_commit_partitions,
)
from spark_jobs.warmup import WarmUp
from spark_jobs.worker import ApplyConfig, make_apply_fn, route

__all__ = ["JobRunner", "RunConfig", "StopRequested", "ensure_job_topics", "start_job", "tick_topic"]

#: logged once the streaming query runs (after every warm-up): what a harness waits for before load
QUERY_STARTED = "streaming query started"
log = logging.getLogger("ballast.runner")


class StopRequested(RuntimeError):
    """Raised into a batch that began after a stop was requested."""


class EpochUnreadable(BallastError, RuntimeError):
    """Spark's offset log cannot say which records an epoch covers."""


class JobRunner(JobClients, DriverFence, EpochCommit, WarmUp):
    """Owns one streaming query. `start()` returns at once; `stop()` ends it after the current epoch."""

    def __init__(self, spark: Any, cfg: RunConfig) -> None:
        self.spark = spark
        self.cfg = cfg
        self.op = get_operator(cfg.path)
        self.journal = Journal(cfg.checkpoint_dir)
        self.inputs = InputRows(cfg.input_topics, cfg.handoff_inputs, self.journal.dir)
        self.read_topics = read_topics(cfg.input_topics, self.op.sources(), cfg.operator)
        self.stream_plan = StreamPlan(self.op, self.inputs, cfg.input_topics, cfg.output_topic, dlq_topic(cfg.job))
        spec = self.op.spec if isinstance(self.op, ProcessorOperator) else None
        # processors: the per-epoch clock (logged, reused on replay) and when timers come due
        self.clocks = ClockLog(self.journal.dir) if spec else None
        self.timers = TimerSchedule(spec.time_mode, spec.lateness_ms) if spec else None
        self.ctl_topic = control_topic(cfg.job)
        self.out_topic = cfg.output_topic
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
        self._times = EpochTimes()  # the running epoch's (spark_jobs.epoch_times)
        self._commit_parts = 0  # partitions the output's marker topic is known to have
        self.epochs_done = 0
        self.last_epoch: int | None = None

    @property
    def transactional(self) -> bool:
        """Whether tasks write the epoch's outputs in Kafka transactions (keyed operators only:
        a stateless query's outputs are written by Spark's Kafka sink, at least once)."""
        return self.cfg.output_mode == TRANSACTIONAL and not isinstance(self.op, StatelessOperator)

    def _txn_target(self, tasks: int) -> TxnTarget | None:
        """The tasks' transactional output, with a marker partition for each of the epoch's `tasks` slots."""
        if not self.transactional:
            return None
        cfg = self.cfg
        assert self.durable is not None
        kw = cfg.security.python_kwargs()
        topic = commits_topic(self.out_topic)
        if tasks > self._commit_parts:
            self._commit_parts = self._kafka("the marker topic's partitions", ensure_commit_partitions,
                                             cfg.bootstrap, topic, tasks, kw)
        return TxnTarget(bootstrap=cfg.bootstrap, job=cfg.job, operator=cfg.operator, store_id=self.durable.store_id,
                         commits_topic=topic, client_kwargs=kw, outage_s=cfg.kafka_outage_s)

    @property
    def k(self) -> int:
        """Bits of the current bin count: the map's (a split step raises it), `--bins` before any map."""
        return bits_for(len(self._state.assignment) if self._state is not None else self.cfg.bins)

    # ---------------------------------------------------------------- lifecycle --------------
    def start(self) -> Any:
        cfg = self.cfg
        fixed = {"job": cfg.job, "operator": cfg.path, "bins": cfg.bins, "input_topic": cfg.input_topic}
        self.journal.ensure_job(fixed)
        # the checkpoint, the store and the job row must belong together: refused before any epoch
        check_job_row(cfg, self.op, self.journal)
        self.durable = bind_state(cfg, self.op, self.journal)
        mx.ensure_job_row(cfg.db_url, cfg.job, cfg.operator, cfg.bins, job_row_config(cfg, self.durable, self.journal),
                          utcnow())
        self._take_token()  # before the first epoch: every older driver of this operator is fenced
        ensure_job_topics(cfg.bootstrap, cfg.job, cfg.output_partitions, cfg.security)
        if self.transactional:  # the marker topic of this operator's output (a chain's hand-off too)
            create_missing_topics(cfg.bootstrap, {commits_topic(self.out_topic): COMMITS_PARTITIONS},
                                  security=cfg.security, configs={commits_topic(self.out_topic): COMMITS_TOPIC_CONFIG})
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
                             "output_commits_topic": commits_topic(self.out_topic) if self.transactional else None,
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
            .option("subscribe", ",".join([*self.read_topics, self.ctl_topic, tick_topic(cfg.job)]))
            .option("includeHeaders", "true" if cfg.handoff_inputs else "false")
            .options(**self._spark_kafka_options(source=True))
            .option("startingOffsets", cfg.starting_offsets)
            .option("failOnDataLoss", "true" if cfg.fail_on_data_loss else "false")
        )
        if cfg.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
        src = reader.load()
        self._warm_up(self._state.workers if self._state else cfg.workers)
        self._warm_plan(src.schema, self._state.workers if self._state else cfg.workers)
        name = f"ballast-{cfg.job}" + (f"-{cfg.operator}" if cfg.siblings else "")
        self.query = (
            self.stream_plan.stream(src).writeStream.queryName(name)
            .foreachBatch(self._batch)
            .option("checkpointLocation", str(self.journal.spark_checkpoint))
            .trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
            .start()
        )
        log.info("%s: job %s", QUERY_STARTED, cfg.job + (f" operator {cfg.operator}" if cfg.siblings else ""))
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
            mx.set_status(self.cfg.db_url, self.cfg.job, self.cfg.operator, "stopped", utcnow(), self.fence)
        except Fenced:
            log.info("not recording the stopped status: a newer driver owns job %s", self.cfg.job)
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
                mx.set_status(self.cfg.db_url, self.cfg.job, self.cfg.operator, "stopping", utcnow(), self.fence)
            except Exception:
                pass
            self._stopper = threading.Thread(target=self.stop, name="ballast-stop", daemon=True)
            self._stopper.start()

    def await_termination(self, poll_s: float = 1.0) -> None:
        """Until the query ends; a failure raises (`Fenced` first when this driver lost its token)."""
        failed: Exception | None = None
        try:
            while self.query is not None and self.query.isActive:
                self.query.awaitTermination(poll_s)
        except Exception as e:  # pyspark raises the query's failure here, once it has ended
            failed = e
        if self._stopper is not None:
            self._stopper.join(timeout=60)
        error = self._failure(failed or (self.query.exception() if self.query is not None else None))
        if error is not None:
            raise error

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
    def _batch(self, df: Any, epoch: int) -> None:
        if self._stopping.is_set():
            # a batch that started while we stop: touch nothing; Spark does not commit it and a
            # restart runs it again (stop() interrupting our Python code mid-epoch is worse)
            raise StopRequested(f"job {self.cfg.job} is stopping; epoch {epoch} left for the next run")
        self._in_batch.set()
        try:
            with self._lock:
                self._run_epoch(df, epoch)
        except Fenced as exc:  # refused: nothing of the epoch committed; raising keeps Spark from committing it
            self._note_fenced(exc)
            raise
        finally:
            self._last_batch_end = time.time()
            self._in_batch.clear()

    def _run_epoch(self, df: Any, epoch: int) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        times = self._times = EpochTimes()
        started_at = utcnow()
        ranges = self._offset_ranges(epoch)
        if ranges is None:
            raise EpochUnreadable(
                f"Spark's offset log under {self.journal.spark_checkpoint} has no readable entry for epoch {epoch} or "
                f"{epoch - 1}: the checkpoint was damaged or edited. Restore it, or start the job on a new "
                "checkpoint (docs/dataplane.md, 'Running a job')")
        input_rows = sum(e - s for t in cfg.input_topics for s, e in ranges.get(t, {}).values())
        control = ranges.get(self.ctl_topic, {})
        control_rows = sum(e - s for s, e in control.values())
        end_offsets = {(t, p): e for t in cfg.input_topics for p, (_, e) in ranges.get(t, {}).items()}
        # the control records: read by the driver from the epoch's logged range (spark_jobs.control_reader)
        records = (self._kafka("the control records", read_control, self._consumer, self.ctl_topic, control)
                   if control_rows else [])
        times.lap("control")

        # 2) decision: reuse the logged one on replay
        decision = self.journal.load_decision(epoch)
        replay = decision is not None
        if decision is None:
            before = self.journal.state_before(epoch) or initial_state(cfg.bins, cfg.workers)
            decision = decide(before, records, epoch=epoch, now=started_at, job=cfg.job, operator=cfg.operator,
                              max_future_s=cfg.max_future_s, max_message_bytes=cfg.max_control_bytes,
                              keyring=cfg.control_keyring, siblings=frozenset(cfg.siblings))
            if records or decision.entries or before.queue or self.journal.latest_state() is None:
                self._guard(f"the decision of epoch {epoch}")  # a stale one would rewrite the newer's
                self.journal.write_decision(decision)
        if decision.entries:  # also on replay: a crash may have come between the file and the rows
            self._db("the decision log", mx.write_step_decisions, cfg.db_url, cfg.job, cfg.operator, epoch,
                     decision.entries, self.fence)
        faults.hit("after_decision")
        st = decision.state_after
        self._state = st

        # 3+4) route and apply; bins move on the executors (the new owner's task loads them from
        # the durable state, pre-copied ones only replay the changes since they were warmed)
        applied = decision.applied
        moving_in: dict[int, tuple[int, ...]] = {}
        for m in (applied.moves if applied else ()):
            moving_in[m.dst] = moving_in.get(m.dst, ()) + (m.bin,)
        warm = {int(w): tuple(bs) for w, bs in decision.warm.items()}
        worker_docs: list[dict[str, Any]] | None = None
        moves_doc: dict[str, Any] | None = None
        clock = None
        if self.clocks is not None and self.durable is not None and self.timers is not None:
            clock = self.clocks.for_epoch(epoch, self.durable.event_max_before(epoch), self.timers.lateness_ms)
        split = applied is not None and applied.is_split
        if (input_rows or moving_in or warm or split
                or (clock and self.timers and self.timers.epoch_needs_tasks(clock))):
            worker_docs = self._apply(df, epoch, st, moving_in, warm, clock, split, input_rows)
            moves_doc = summarize_moves(applied, worker_docs) if applied and applied.moves else None
        faults.hit("after_apply")

        # 5) metrics, routing map, checkpoints, events, heartbeat: one DB transaction
        worker_docs = self._worker_metrics(st.workers, worker_docs)
        backlog, rate, end_now = self._backlog(end_offsets)
        times.lap("backlog")
        ended_at = utcnow()
        batch_ms = (time.perf_counter() - t0) * 1000
        acks = self._db("the epoch's commit", self._commit_db, epoch, decision, moves_doc, worker_docs, started_at,
                        ended_at, batch_ms, input_rows, control_rows, backlog, rate, end_now)
        times.lap("db")
        faults.hit("before_acks")
        self._kafka("the acks", self._send_acks, acks)
        times.lap("acks")
        self.journal.gc(epoch)
        if self.clocks is not None:
            self.clocks.gc(epoch - KEEP_EPOCHS)
        self.inputs.gc(epoch - KEEP_EPOCHS)
        self.epochs_done += 1
        self.last_epoch = epoch
        self._log_epoch(epoch, decision, moves_doc, input_rows, batch_ms, backlog, replay, worker_docs)
        log.info("epoch %d time ms: %s", epoch, times.text(spark_outside(self.query)))

    def _apply(self, df: Any, epoch: int, st: ControlState, moving_in: dict[int, tuple[int, ...]],
               warm: dict[int, tuple[int, ...]], clock: EpochClock | None = None,
               split: bool = False, input_rows: int = 0) -> list[dict[str, Any]]:
        """One Spark job: W tasks (more while a pre-copy warms a worker that does not exist yet),
        then the durable commit of the epoch (manifest). Returns the tasks' metrics."""

        cfg, durable = self.cfg, self.durable
        assert durable is not None
        durable.record_map(st.map_version, st.assignment)
        tasks = max([st.workers] + [w + 1 for w in warm])
        if self.scaler is not None:
            self.scaler.scale_to(tasks)
        if isinstance(self.op, StatelessOperator):
            return self._apply_stateless(df, epoch, st.workers, input_rows)
        snapshot = durable.snapshot_due(epoch)
        self._times.lap("decide")
        keyed = self.stream_plan.epoch(df, epoch, clock)
        k = self.k  # st is self._state: the map this epoch routes by
        acfg = ApplyConfig(
            epoch=epoch, job=cfg.job, operator=cfg.path, bins_bits=k, base_bits=bits_for(cfg.bins), workers=tasks,
            assignment=tuple(st.assignment), state_uri=durable.uri, store_id=durable.store_id,
            history=durable.history(before=epoch), output_topic=self.out_topic, dlq_topic=dlq_topic(cfg.job),
            input_topic=cfg.input_topic, cache_dir=self._cache_dir, snapshot=snapshot, warm=warm, moving_in=moving_in,
            clock=clock, op_conf=self.op.task_conf() if isinstance(self.op, ProcessorOperator) else {}, split=split,
            txn=self._txn_target(tasks))
        out = route(keyed, k, st.assignment, tasks, make_apply_fn(acfg))
        if acfg.txn is not None:  # each task commits its outputs itself (spark_jobs.txn_output): no sink
            writer = out.write.format("noop").mode("overwrite")
        else:
            writer = out.write.format("kafka").option("kafka.bootstrap.servers", cfg.bootstrap).options(
                **self._spark_kafka_options(source=False))
        self._times.lap("plan")
        writer.save()
        self._times.lap("spark")
        faults.hit("before_manifest")
        docs = self._commit_manifest(durable, epoch, st.map_version, tasks, snapshot)
        if self.timers is not None:
            self.timers.update([d for d in docs if int(d.get("worker", 0)) < st.workers])
        dropped = durable.retain(lambda: self._guard(f"retention after epoch {epoch}"))
        if dropped:
            log.info("retention: dropped %d old epochs of durable state", dropped)
        self._times.lap("manifest")
        return docs

    def _apply_stateless(self, df: Any, epoch: int, workers: int, input_rows: int) -> list[dict[str, Any]]:
        """A stateless query's epoch (spark_jobs.stateless): one Spark job, every stage in the JVM,
        written by Spark's Kafka sink; no state, so no manifest and nothing to move.

        Spark's tasks follow the input partitions, not the worker map: the epoch's input rows and its
        wall time are reported spread evenly over the W workers (DS2's inputs and the console stay
        whole). Outputs and dead letters are not counted: Spark's `Observation` never reports for a
        Kafka write, and a count would be a second pass over the input; the dead-letter topic holds
        every one, with its reason (docs/operators.md)."""
        assert isinstance(self.op, StatelessOperator)
        cfg = self.cfg
        t0 = time.perf_counter()
        self._times.lap("decide")
        writer = self.stream_plan.epoch(df, epoch).write.format("kafka").option(
            "kafka.bootstrap.servers", cfg.bootstrap).options(**self._spark_kafka_options(source=False))
        self._times.lap("plan")
        writer.save()
        self._times.lap("spark")
        wall_ms = (time.perf_counter() - t0) * 1000

        def share(w: int) -> int:
            return input_rows // workers + (1 if w < input_rows % workers else 0)

        return [{"worker": w, "records_in": share(w), "records_out": 0, "dead_letters": 0,
                 "useful_ms": wall_ms / workers, "wall_ms": wall_ms, "state_keys": 0, "state_bytes": 0, "bins": {}}
                for w in range(workers)]


def read_topics(topics: list[str], sources: tuple[int, ...] | None, operator: str) -> list[str]:
    """The input topics an operator reads: its declared `sources` (positions in `topics`), else all."""
    if sources is None:
        return list(topics)
    bad = [i for i in sources if i >= len(topics)]
    if bad:
        raise ValueError(f"operator {operator} reads input position(s) {bad}, but --input-topic lists {len(topics)} "
                         f"topic(s): {','.join(topics)}; give it every topic its query names")
    return [t for i, t in enumerate(topics) if i in sources]


def start_job(spark: Any, cfg: RunConfig) -> JobRunner:
    """Start a job in this process (tests, notebooks); call `.stop()` on the result to end it."""
    runner = JobRunner(spark, cfg)
    runner.start()
    return runner
