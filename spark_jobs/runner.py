"""The job runner: one Structured Streaming query over the input topic AND `<job>.control`.

Per epoch (foreachBatch), in this order — each step is safe to redo when Spark replays the epoch:
 1. control records of the batch: the control topic is a second topic of the same Kafka source, so
    Spark's offset log fixes which of its records an epoch covers and a replay reads the same ones
    (the driver reads them, spark_jobs.control_reader; the stream carries the input rows only,
    already through the operator's epoch-free expressions, spark_jobs.stream_plan);
 2. decide (spark_jobs.control) — or reuse the decision logged for this epoch — and log it
    durably (journal file + StepDecision rows) before touching any state;
 3–4. route the input rows to workers (`repartitionById(W, assignment[bin])`) and apply them, the applied
    step's bins moving inside their new owners' tasks (spark_jobs.worker); outputs carry ids (epoch, worker, seq);
 5. commit metrics, routing map, checkpoints, events and the heartbeat in one DB transaction,
    then echo the checkpoints on `<job>.control.acks`.

The loop and the lifecycle are here; each step is a component with an explicit hand-off:
`JobClients` (spark_jobs.job_clients: the job's Kafka clients, DB/Kafka calls with outage budgets,
offsets), `DriverFence` (spark_jobs.fencing: the driver's token), `EpochDecide`
(spark_jobs.epoch_decide: steps 1–2, giving an `EpochDecided`), `EpochApply` (spark_jobs.epoch_apply:
steps 3–4, given an `EpochWork`), `EpochCommit` (spark_jobs.epoch_commit: step 5, given an
`EpochReport`), `AfterCommit` (spark_jobs.epoch_tail: the work after it) and `WarmUp`
(spark_jobs.warmup). The configuration is spark_jobs.run_config.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from ballast.protocol import Settings, acks_topic, control_topic, message_key, utcnow
from ballast.store import writer as mx
from ballast.store.fencing import Fence, Fenced
from ballast.topics import create_missing_topics
from spark_jobs import faults, prom_metrics, txn_output
from spark_jobs.binding import bind_state, check_job_row, job_row_config
from spark_jobs.bins import bits_for
from spark_jobs.control import has_due_step, tick_message
from spark_jobs.control_handover import clock_for
from spark_jobs.control_state import ControlState
from spark_jobs.durable import DurableState
from spark_jobs.epoch_apply import EpochApply, EpochWork
from spark_jobs.epoch_commit import EpochCommit, EpochReport, summarize_moves
from spark_jobs.epoch_decide import EpochDecide
from spark_jobs.epoch_tail import AfterCommit, EpochTail
from spark_jobs.epoch_times import EpochTimes
from spark_jobs.executors import ExecutorScaler
from spark_jobs.fencing import DriverFence
from spark_jobs.handover import from_decision
from spark_jobs.inputs import InputRows
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import Journal
from spark_jobs.live_code import LiveCode
from spark_jobs.offsets import clear_interrupted_start
from spark_jobs.operator_loader import get_operator
from spark_jobs.output import dlq_topic
from spark_jobs.processing import ProcessorOperator
from spark_jobs.rebalance_signals import RebalanceSignals
from spark_jobs.run_config import COMMITS_TOPIC_CONFIG, RunConfig, ensure_job_topics, read_topics, tick_topic
from spark_jobs.stateless import StatelessOperator
from spark_jobs.storage import Location
from spark_jobs.stream_plan import StreamPlan
from spark_jobs.streaming_query import Effective, StreamingQuery
from spark_jobs.timers import ClockLog, TimerSchedule
from spark_jobs.txn_output import COMMITS_PARTITIONS, TRANSACTIONAL, commits_topic
from spark_jobs.warmup import WarmUp, default_cache_dir

__all__ = ["JobRunner", "RunConfig", "StopRequested", "ensure_job_topics", "start_job", "tick_topic"]

#: logged once the streaming query runs (after every warm-up): what a harness waits for before load
QUERY_STARTED = "streaming query started"
log = logging.getLogger("ballast.runner")


class StopRequested(RuntimeError):
    """Raised into a batch that began after a stop was requested."""


class JobRunner:
    """Owns one streaming query. `start()` returns at once; `stop()` ends it after the current epoch."""

    def __init__(self, spark: Any, cfg: RunConfig) -> None:
        self.spark = spark
        self.cfg = cfg
        self.op = get_operator(cfg.path)
        self.journal = Journal(cfg.checkpoint_dir)
        # a keyed operator with transactional output ends its epoch's job in Ballast's transactional
        # writer, where the hand-off's mark can be observed (spark_jobs.inputs)
        self.inputs = InputRows(cfg.input_topics, cfg.handoff_inputs, self.journal.dir,
                                observe=cfg.output_mode == TRANSACTIONAL and not isinstance(self.op, StatelessOperator))
        self.read_topics = read_topics(cfg.input_topics, self.op.sources(), cfg.operator)
        self.stream_plan = StreamPlan(self.op, self.inputs, cfg.input_topics)
        spec = self.op.spec if isinstance(self.op, ProcessorOperator) else None
        # processors: the per-epoch clock (logged, reused on replay) and when timers come due
        self.clocks = ClockLog(self.journal.dir) if spec else None
        self.timers = TimerSchedule(spec.time_mode, spec.lateness_ms) if spec else None
        self.ctl_topic = control_topic(cfg.job)
        self.started_at = utcnow()
        self._stopping = threading.Event()
        self._in_batch = threading.Event()
        # the components (one concern each) and what they hand each other
        self.clients = JobClients(cfg, self.journal, self.read_topics, self._stopping)
        self.fencing = DriverFence(cfg, self.clients, self._stopping)
        self.live_code = LiveCode(spark, self.op, cfg.path)  # upgrade steps (spark_jobs.live_code)
        self.decider = EpochDecide(cfg, self.clients, self.journal, self.fencing, self.ctl_topic, self.live_code)
        if spec is not None and spec.window is not None and self.clocks is not None:  # handover steps
            self.decider.handover_clock = clock_for(spec.window, lambda: self.durable, self.clocks.watermark_of)
        self.applier = EpochApply(cfg, self.op, self.stream_plan, self.clients, self.fencing, self.timers)
        self.applier.live_code = self.live_code
        self.committer = EpochCommit(cfg, self.clients, self.fencing, self._stopping, self.started_at)
        self.signals = RebalanceSignals(cfg, self.clients)
        self.warmup = WarmUp(spark, cfg, self.op, self.stream_plan, self.inputs, self.clients)
        self.durable: DurableState | None = None
        self.scaler: ExecutorScaler | None = None
        self.streaming: StreamingQuery | None = None  # built by start()
        self._last_batch_end = time.time()
        self._last_tick = 0.0
        self._state: ControlState | None = None
        self._lock = threading.Lock()
        self._stopper: threading.Thread | None = None
        self._times = EpochTimes()  # the running epoch's (spark_jobs.epoch_times)
        self.epochs_done = 0
        self.last_epoch: int | None = None
        self.prom: prom_metrics.Endpoint | None = None  # --metrics-port: the driver's Prometheus endpoint
        self.tail = EpochTail()  # each epoch's work after its commit (spark_jobs.epoch_tail)
        self.after_commit = AfterCommit(cfg, self.journal, self.clocks, self.inputs, self.committer, self.signals,
                                        self.clients, lambda: self.query)

    @property
    def fence(self) -> Fence | None:
        """This driver's token (None before the start took it)."""
        return self.fencing.fence

    @property
    def k(self) -> int:
        """Bits of the current bin count: the map's (a split step raises it), `--bins` before any map."""
        return bits_for(len(self._state.assignment) if self._state is not None else self.cfg.bins)

    # ---------------------------------------------------------------- lifecycle --------------
    def start(self) -> Any:
        cfg = self.cfg
        fixed = {"job": cfg.job, "operator": cfg.path, "bins": cfg.bins, "input_topic": cfg.input_topic}
        # on an object store: the bucket exists and takes our keys, or an error that says what to do
        for loc in (self.journal.root, Location.of(cfg.state_location)):
            loc.check_access()
        self.journal.ensure_job(fixed)
        # the checkpoint, the store and the job row must belong together: refused before any epoch
        check_job_row(cfg, self.op, self.journal)
        self.durable = self.applier.durable = bind_state(cfg, self.op, self.journal)
        mx.ensure_job_row(cfg.db_url, cfg.job, cfg.operator, cfg.bins,
                          job_row_config(cfg, self.durable, self.journal, self.op), utcnow())
        self.fencing.take()  # before the first epoch: every older driver of this operator is fenced
        clear_interrupted_start(self.journal.spark_checkpoint)  # fenced: no other driver writes it now
        ensure_job_topics(cfg.bootstrap, cfg.job, cfg.output_partitions, cfg.security)
        out_commits = commits_topic(cfg.output_topic)
        if self.applier.transactional:  # the marker topic of this operator's output (a chain's hand-off too)
            create_missing_topics(cfg.bootstrap, {out_commits: COMMITS_PARTITIONS},
                                  security=cfg.security, configs={out_commits: COMMITS_TOPIC_CONFIG})
        self._state = self.journal.latest_state()
        self.live_code.restore(self._state)  # the versions upgrade steps put in force: shipped again
        self.stop_file.delete()  # a stale request must not stop this run
        if self._state is not None and self._state.workers != cfg.workers:
            log.warning("job %s restarts with the logged map (W=%d, map v%d); --workers %d is ignored",
                        cfg.job, self._state.workers, self._state.map_version, cfg.workers)
        cache_dir = self.applier.cache_dir = default_cache_dir(cfg, self.spark, self.journal)
        self.scaler = self.applier.scaler = self.committer.scaler = ExecutorScaler(self.spark, cfg.max_workers,
                                                                                 cfg.master_ui)
        workers = self._state.workers if self._state else cfg.workers
        self.scaler.scale_to(workers)
        self.committer.spark_ui_url = self.spark.sparkContext.uiWebUrl  # None when the UI is off
        if self.committer.spark_ui_url:
            log.info("Spark UI of %s: %s", cfg.job, self.committer.spark_ui_url)
        self.clients.open()
        if cfg.metrics_port is not None:  # before the first epoch, so its figures are served
            self.prom = prom_metrics.acquire(cfg.metrics_port)
        # a settings step's values (journal) win over the command line's until another one changes them
        from_steps = self._state.settings if self._state else Settings()
        effective = Effective.of(cfg, from_steps)
        log.info("ballast job starting with effective configuration: %s",
                 json.dumps({**cfg.to_dict(), "trigger_ms": effective.trigger_ms,
                             "max_offsets_per_trigger": effective.max_records_per_epoch,
                             "settings_from_steps": from_steps.to_dict(), "state_uri": self.durable.uri,
                             "bins_bits": self.k,
                             "store_id": self.durable.store_id, "dlq_topic": dlq_topic(cfg.job),
                             "cache_dir": cache_dir or "<each executor's own directory>",
                             "control_topic": self.ctl_topic, "acks_topic": acks_topic(cfg.job),
                             "output_topic": cfg.output_topic,
                             "output_commits_topic": out_commits if self.applier.transactional else None,
                             "spark_checkpoint": str(self.journal.spark_checkpoint)}, sort_keys=True))
        if cfg.control_keyring is None:
            log.warning("control messages are NOT authenticated (unsigned mode, for local use): anyone who can "
                        "write to %s can reconfigure job %s. Give the job keys with --control-keys FILE or "
                        "BALLAST_CONTROL_KEYS (docs/operations.md, 'Signed control messages')", self.ctl_topic, cfg.job)
        else:
            log.info("control messages must be signed: key id(s) %s, max age %.0fs",
                     ", ".join(cfg.control_keyring.kids), cfg.control_keyring.max_age_s)
        self.signals.follow_trigger(effective.trigger_ms)
        self.streaming = StreamingQuery(self.spark, cfg, self.read_topics, self.ctl_topic,
                                        self.clients.spark_kafka_options(source=True), self.stream_plan.stream,
                                        self._batch, self.journal.spark_checkpoint, self._in_batch, self._stopping)
        src = self.streaming.build(effective)
        self.warmup.workers(workers, cache_dir, self.durable.store_id)
        self.warmup.plan(src.schema, self.k, workers, self.applier.txn_target(workers))
        self.streaming.start(src, effective)
        log.info("%s: job %s", QUERY_STARTED, cfg.job + (f" operator {cfg.operator}" if cfg.siblings else ""))
        threading.Thread(target=self._ticker, name="ballast-ticker", daemon=True).start()
        return self.query

    @property
    def stop_file(self) -> Any:
        """Touch it (`python -m spark_jobs.cli stop --checkpoint-dir D`) to stop after the current epoch.

        Under spark-submit the driver JVM is the parent process and answers SIGTERM by stopping
        the SparkContext at once; the stop file reaches the Python driver whatever launched it."""
        return self.journal.dir / "STOP"

    @property
    def query(self) -> Any:
        """The running streaming query (a settings step replaces it; spark_jobs.streaming_query)."""
        return self.streaming.query if self.streaming is not None else None

    @property
    def running(self) -> bool:
        """The query runs, or a settings step is replacing it with one that will."""
        return self.streaming is not None and self.streaming.active

    def stop(self, timeout_s: float = 120.0) -> None:
        """Stop after the current epoch (never in the middle of ours)."""
        self._stopping.set()
        deadline = time.time() + timeout_s
        if self.streaming is not None:  # a restart under way ends first (it starts nothing once stopping)
            self.streaming.wait_replaced(timeout_s)
        while self._in_batch.is_set() and time.time() < deadline:
            time.sleep(0.05)
        if self.query is not None:
            self.query.stop()
        if self.applier.transactional:  # its writer's clients in this JVM (local mode: the executors')
            txn_output.close_clients(self.spark)
        if not self.tail.join(timeout_s=30):
            log.warning("the last epoch's work after its commit still runs after 30 s; stopping without it")
        try:
            mx.set_status(self.cfg.db_url, self.cfg.job, self.cfg.operator, "stopped", utcnow(), self.fence)
        except Fenced:
            log.info("not recording the stopped status: a newer driver owns job %s", self.cfg.job)
        except Exception:  # the DB being away must not turn a clean stop into a crash
            log.exception("could not record the stopped status")
        self.clients.close()
        if self.prom is not None:
            prom_metrics.release(self.prom)
            self.prom = None
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
        failed = self.streaming.await_termination(poll_s) if self.streaming is not None else None
        if self._stopper is not None:
            self._stopper.join(timeout=60)
        error = self.fencing.failure(failed or (self.query.exception() if self.query is not None else None))
        if error is not None:
            raise error

    def _ticker(self) -> None:
        """Queued steps that came due need an epoch even when no data arrives: send a tick record
        to our own control topic (in-band, so replays stay exact)."""
        while not self._stopping.is_set() and (self.streaming is None or self.streaming.active):
            eff = self.streaming.effective if self.streaming is not None else None
            period = max((eff.trigger_ms if eff else self.cfg.trigger_ms) / 1000.0, 0.5)
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
            ho = self.decider.handover_clock  # a handover whose last epoch ran past its boundary is due
            clock = ho(self.last_epoch + 1) if ho and st.handover and self.last_epoch is not None else None
            if timers_due or has_due_step(st, utcnow(), clock):
                try:
                    job, op = self.cfg.job, self.cfg.operator
                    self.clients.producer.send(tick_topic(job), key=message_key(job, op),
                                               value=tick_message(job, op, utcnow())).get(timeout=10)
                    self._last_tick = now
                except Exception:
                    log.exception("tick failed")

    # ---------------------------------------------------------------- one epoch -------------
    def _batch(self, df: Any, epoch: int) -> None:
        if self._stopping.is_set():
            # a batch that started while we stop: touch nothing; Spark does not commit it and a
            # restart runs it again (stop() interrupting our Python code mid-epoch is worse)
            raise StopRequested(f"job {self.cfg.job} is stopping; epoch {epoch} left for the next run")
        if self.streaming is not None and self.streaming.replacing.is_set():  # the same for a settings restart
            raise StopRequested(f"job {self.cfg.job} restarts its query for new settings; epoch {epoch} runs on it")
        self._in_batch.set()
        try:
            with self._lock:
                self._run_epoch(df, epoch)
        except Fenced as exc:  # refused: nothing of the epoch committed; raising keeps Spark from committing it
            self.fencing.note(exc)
            if self.prom is not None:
                self.prom.metrics.note_fenced(self.cfg.job, self.cfg.operator)
            raise
        finally:
            self._last_batch_end = time.time()
            self._in_batch.clear()

    def _run_epoch(self, df: Any, epoch: int) -> None:
        cfg = self.cfg
        t0 = time.perf_counter()
        times = self._times = EpochTimes()
        self.tail.join()  # the epoch before's tail: its critical path goes into this epoch's commit
        if self.tail.waited_ms >= 1.0:  # a tail that outlasted Spark's own work between the epochs
            times.lap("tail")
        started_at = utcnow()
        # 1+2) the epoch's control records and its decision, logged before anything moves (or reused on replay)
        decided = self.decider.run(epoch, started_at, times)
        decision, input_rows = decided.decision, decided.input_rows
        st = decision.state_after
        self._state = st

        # 3+4) route and apply; bins move on the executors (the new owner's task loads them from
        # the durable state, pre-copied ones only replay the changes since they were warmed)
        applied = decision.applied
        moving_in: dict[int, tuple[int, ...]] = {}
        for m in (applied.moves if applied else ()):
            moving_in[m.dst] = moving_in.get(m.dst, ()) + (m.bin,)
        clock = None
        if self.clocks is not None and self.durable is not None and self.timers is not None:
            clock = self.clocks.for_epoch(epoch, self.durable.event_max_before(epoch), self.timers.lateness_ms)
        work = EpochWork(epoch=epoch, state=st, moving_in=moving_in,
                         warm={int(w): tuple(bs) for w, bs in decision.warm.items()}, clock=clock,
                         split=applied is not None and applied.is_split, input_rows=input_rows,
                         merged_from=bits_for(applied.bins_before) if applied is not None and applied.is_merge
                         else None, shadow=decision.shadow, handover=from_decision(decision.handover))
        worker_docs: list[dict[str, Any]] | None = None
        moves_doc: dict[str, Any] | None = None
        if (input_rows or work.moving_in or work.warm or work.split or work.merged_from is not None
                or self.live_code.probing or (clock and self.timers and self.timers.epoch_needs_tasks(clock))):
            worker_docs = self.applier.run(df, work, times)
            moves_doc = summarize_moves(applied, worker_docs) if applied and applied.moves else None
        faults.hit("after_apply")

        # 5) metrics, routing map, checkpoints, events, heartbeat: one DB transaction, then the acks
        backlog, rate, end_now = self.clients.backlog(decided.end_offsets)
        times.lap("backlog")
        report = EpochReport(epoch=epoch, decision=decision, moves=moves_doc,
                             workers=self.committer.worker_metrics(st.workers, worker_docs), started_at=started_at,
                             ended_at=utcnow(), batch_ms=(time.perf_counter() - t0) * 1000, input_rows=input_rows,
                             control_rows=decided.control_rows, backlog=backlog, rate=rate, end_offsets=end_now,
                             replay=decided.replay)
        acks = self.clients.db("the epoch's commit", self.committer.commit, report)
        times.lap("db")
        if self.prom is not None:  # committed values only: after the commit returned
            self._observe(report)
        faults.hit("before_acks")
        self.clients.kafka("the acks", self.committer.send_acks, acks)
        times.lap("acks")
        self.epochs_done += 1
        self.last_epoch = epoch
        if applied is not None and applied.is_settings and self.streaming is not None:  # committed: restart
            wanted = Effective.of(cfg, st.settings)
            if wanted != self.streaming.effective:  # a replay of the step's epoch on the new query: already so
                self.streaming.restart(wanted, epoch)
                self.signals.follow_trigger(wanted.trigger_ms)
        # the rest changes nothing a replay or a restart reads: it runs while Spark plans the next epoch
        self.tail.start(epoch, lambda: self.after_commit(report, times))

    def _observe(self, report: EpochReport) -> None:
        """The committed epoch's figures to the Prometheus endpoint; a failure there is logged, never the epoch's."""
        assert self.prom is not None
        try:
            self.prom.metrics.observe(self.cfg.job, self.cfg.operator, report)
        except Exception:
            log.exception("epoch %d: could not update the Prometheus metrics", report.epoch)


def start_job(spark: Any, cfg: RunConfig) -> JobRunner:
    """Start a job in this process (tests, notebooks); call `.stop()` on the result to end it."""
    runner = JobRunner(spark, cfg)
    runner.start()
    return runner
