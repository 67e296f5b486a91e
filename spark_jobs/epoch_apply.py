"""Steps 3–4 of an epoch: route the input rows to the workers of the map and apply them in one
Spark job (bins move on the executors, inside the same tasks), then the durable commit of the
epoch (manifest) and retention; or, for a stateless query, one all-JVM Spark job.

A component of `spark_jobs.runner.JobRunner`: the loop hands it an `EpochWork` (the decided state
and what moves) and gets the tasks' metrics back; it never touches the metrics DB itself.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from spark_jobs import faults, id_sink, txn_output
from spark_jobs.bins import bits_for
from spark_jobs.control_state import ControlState
from spark_jobs.durable import DurableState
from spark_jobs.epoch_times import EpochTimes
from spark_jobs.executors import ExecutorScaler
from spark_jobs.fencing import DriverFence
from spark_jobs.handover import BinHandover, CopyRule
from spark_jobs.job_clients import JobClients
from spark_jobs.live_code import LiveCode
from spark_jobs.output import dlq_topic
from spark_jobs.processing import ProcessorOperator
from spark_jobs.routing import route
from spark_jobs.run_config import RunConfig
from spark_jobs.stateless import StatelessOperator
from spark_jobs.timers import EpochClock, TimerSchedule
from spark_jobs.txn_output import TRANSACTIONAL, commits_topic, ensure_commit_partitions
from spark_jobs.txn_slots import TxnTarget
from spark_jobs.worker import APPLY_PROPERTY, ApplyConfig, apply_task, encode_config

log = logging.getLogger("ballast.runner")


@dataclass(frozen=True)
class EpochWork:
    """What an epoch's tasks do: the hand-off from the decision to the apply."""

    epoch: int
    state: ControlState  # the map this epoch routes by (after its applied step)
    moving_in: dict[int, tuple[int, ...]] = field(default_factory=dict)  # worker -> bins it receives
    warm: dict[int, tuple[int, ...]] = field(default_factory=dict)  # worker -> bins it pre-copies
    clock: EpochClock | None = None  # a processor's clock for the epoch (timers)
    split: bool = False  # the applied step splits bins
    merged_from: int | None = None  # the applied step merges bins: the k before it
    shadow: dict[str, Any] | None = None  # a shadow upgrade the tasks try (spark_jobs.control_state.EpochControl)
    handover: tuple[BinHandover, ...] = ()  # bins in a handover this epoch (spark_jobs.handover)
    input_rows: int = 0

    @property
    def tasks(self) -> int:
        """W, or more while a pre-copy warms a worker the map does not have yet."""
        return max([self.state.workers] + [w + 1 for w in self.warm])


class EpochApply:
    """One epoch's Spark job and durable commit."""

    def __init__(self, cfg: RunConfig, op: Any, stream_plan: Any, clients: JobClients, fencing: DriverFence,
                 timers: TimerSchedule | None) -> None:
        self.cfg = cfg
        self.op = op
        self.stream_plan = stream_plan  # spark_jobs.stream_plan.StreamPlan
        self._clients = clients
        self._fencing = fencing  # the manifest and retention check the driver's token
        self.timers = timers
        # set at start, once the state is bound and the executors asked for
        self.durable: DurableState | None = None
        self.scaler: ExecutorScaler | None = None
        self.cache_dir: str | None = None
        self._commit_parts = 0  # partitions the output's marker topic is known to have
        self.live_code: LiveCode | None = None  # the processor versions tasks load (set at start)

    @property
    def transactional(self) -> bool:
        """Whether tasks write the epoch's outputs in Kafka transactions (keyed operators only:
        a stateless query's outputs are written by Spark's Kafka sink, at least once)."""
        return self.cfg.output_mode == TRANSACTIONAL and not isinstance(self.op, StatelessOperator)

    def run(self, df: Any, work: EpochWork, times: EpochTimes) -> list[dict[str, Any]]:
        """One Spark job: the work's tasks, then the durable commit of the epoch (manifest).
        Returns the tasks' metrics."""
        cfg, durable, st, epoch = self.cfg, self.durable, work.state, work.epoch
        assert durable is not None, "EpochApply.run before the runner's start bound the state"
        durable.record_map(st.map_version, st.assignment)
        tasks = work.tasks
        if self.scaler is not None:
            self.scaler.scale_to(tasks)
        if isinstance(self.op, StatelessOperator):
            return self._stateless(df, epoch, st.workers, work.input_rows, times)
        snapshot = durable.snapshot_due(epoch)
        # a completing handover's bins restart in the new owner's objects: the manifest says so
        # (spark_jobs.history), so no later reader needs the old owner's state and no snapshot is taken
        handed_over = {h.bin: (h.since, h.dst) for h in work.handover if h.completes}
        times.lap("decide")
        keyed = self.stream_plan.epoch(df, epoch, work.clock)
        k = bits_for(len(st.assignment))
        acfg = ApplyConfig(
            epoch=epoch, job=cfg.job, operator=cfg.path, bins_bits=k, base_bits=bits_for(cfg.bins), workers=tasks,
            assignment=tuple(st.assignment), state_uri=durable.uri, store_id=durable.store_id,
            history=durable.history(before=epoch), output_topic=cfg.output_topic, dlq_topic=dlq_topic(cfg.job),
            input_topic=cfg.input_topic, cache_dir=self.cache_dir, snapshot=snapshot, warm=work.warm,
            moving_in=work.moving_in, clock=work.clock,
            op_conf=self.op.task_conf() if isinstance(self.op, ProcessorOperator) else {}, split=work.split,
            merged_from=work.merged_from, code=self.live_code.chain(st) if self.live_code is not None else (),
            shadow=self.live_code.shadow_chain(st, work.shadow) if self.live_code is not None else (),
            shadow_fields=tuple(work.shadow.get("fields", ())) if work.shadow else (),
            probe=self.live_code.probe_chain() if self.live_code is not None else (), handover=work.handover)
        out = route(keyed, k, st.assignment, tasks, apply_task, work.handover,
                    CopyRule.of(getattr(self.op, "spec", None), work.clock), self.stream_plan.combine)
        txn = self.txn_target(tasks)
        if txn is not None:  # each task commits its outputs in a Kafka transaction (spark_jobs.txn_output)
            writer = txn_output.writer(out, epoch, txn, self._clients.spark_kafka_options(source=False))
        else:
            writer = out.write.format("kafka").option("kafka.bootstrap.servers", cfg.bootstrap).options(
                **self._clients.spark_kafka_options(source=False))
        sc = keyed.sparkSession.sparkContext
        sc.setLocalProperty(APPLY_PROPERTY, encode_config(acfg))  # what apply_task reads (spark_jobs.worker)
        times.lap("plan")
        try:
            writer.save()
        finally:
            sc.setLocalProperty(APPLY_PROPERTY, None)  # no later job of this thread carries it
        self.stream_plan.inputs.after_job(epoch)  # a hand-off's mark observed in the job, before the manifest
        times.lap("spark")
        faults.hit("before_manifest")
        docs = self._fencing.commit_manifest(durable, epoch, st.map_version, tasks, snapshot, handed_over)
        if self.live_code is not None:
            self.live_code.observe(work.shadow, docs, epoch)
        if self.timers is not None:
            self.timers.update([d for d in docs if int(d.get("worker", 0)) < st.workers])
        dropped = durable.retain(lambda: self._fencing.guard(f"retention after epoch {epoch}"))
        if dropped:
            log.info("retention: dropped %d old epochs of durable state", dropped)
        times.lap("manifest")
        return docs

    def txn_target(self, tasks: int) -> TxnTarget | None:
        """The tasks' transactional output, with a marker partition for each of the epoch's `tasks` slots."""
        if not self.transactional:
            return None
        cfg = self.cfg
        assert self.durable is not None
        kw = cfg.security.python_kwargs()
        topic = commits_topic(cfg.output_topic)
        if tasks > self._commit_parts:
            self._commit_parts = self._clients.kafka("the marker topic's partitions", ensure_commit_partitions,
                                                     cfg.bootstrap, topic, tasks, kw)
        return TxnTarget(bootstrap=cfg.bootstrap, job=cfg.job, operator=cfg.operator, store_id=self.durable.store_id,
                         commits_topic=topic, client_kwargs=kw, outage_s=cfg.kafka_outage_s)

    def _stateless(self, df: Any, epoch: int, workers: int, input_rows: int,
                   times: EpochTimes) -> list[dict[str, Any]]:
        """A stateless query's epoch (spark_jobs.stateless): one Spark job, every stage in the JVM,
        written by Ballast's Kafka writer (spark_jobs.id_sink); no state, so no manifest and nothing to move.

        Spark's tasks follow the input partitions, not the worker map: the epoch's input rows and its
        wall time are reported spread evenly over the W workers (DS2's inputs and the console stay
        whole). Outputs and dead letters are not counted: Spark's `Observation` never reports for a
        Kafka write, and a count would be a second pass over the input; the dead-letter topic holds
        every one, with its reason (docs/operators.md)."""
        cfg = self.cfg
        t0 = time.perf_counter()
        times.lap("decide")
        writer = id_sink.writer(self.stream_plan.epoch(df, epoch), epoch, cfg.bootstrap,
                                self._clients.spark_kafka_options(source=False), cfg.output_topic, dlq_topic(cfg.job))
        times.lap("plan")
        writer.save()
        times.lap("spark")
        return stateless_docs(input_rows, workers, (time.perf_counter() - t0) * 1000)


def stateless_docs(input_rows: int, workers: int, wall_ms: float) -> list[dict[str, Any]]:
    """A stateless epoch's metrics: its rows and wall time spread evenly over the W workers."""

    def share(w: int) -> int:
        return input_rows // workers + (1 if w < input_rows % workers else 0)

    return [{"worker": w, "records_in": share(w), "records_out": 0, "dead_letters": 0,
             "useful_ms": wall_ms / workers, "wall_ms": wall_ms, "state_keys": 0, "state_bytes": 0, "bins": {}}
            for w in range(workers)]
