"""Warm-up before the first batch: start the Python workers, import the job's modules and open
the caches, and run the epoch's Spark plan once on a synthetic row, so the first epoch after a
(re)start does not pay ~10 s for it; and where the caches live.

A component of `spark_jobs.runner.JobRunner`, run once by its start.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ballast.protocol import message_key, utcnow
from spark_jobs import id_sink, txn_output
from spark_jobs.control import tick_message
from spark_jobs.handover import BinHandover, CopyRule
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import Journal
from spark_jobs.output import dlq_topic
from spark_jobs.run_config import RunConfig, tick_topic
from spark_jobs.stateless import QueryRefused, StatelessOperator
from spark_jobs.timers import EpochClock

log = logging.getLogger("ballast.runner")


class WarmUp:
    """Python workers and caches ready before the first epoch."""

    def __init__(self, spark: Any, cfg: RunConfig, op: Any, stream_plan: Any, inputs: Any,
                 clients: JobClients) -> None:
        self.spark = spark
        self.cfg = cfg
        self.op = op
        self.stream_plan = stream_plan  # spark_jobs.stream_plan.StreamPlan: the epoch's own plan
        self.inputs = inputs  # spark_jobs.inputs.InputRows
        self._clients = clients  # Spark's Kafka options and the topics the operator reads

    def workers(self, workers: int, cache_dir: str | None, store_id: str) -> list[int]:
        """Before the first batch: start the Python workers (imports of pyarrow, lmdb, the job's
        modules, the operator) and open the caches, so the first epoch after a (re)start does not
        pay ~10 s for it. A failure here is only logged: the first epoch then pays the cost.

        Through `mapInArrow`, as the epochs run, and not an RDD: Spark keeps one pool of Python
        workers per environment, and its SQL runners add a variable (SPARK_SIMPLIFIED_TRACEBACK) that
        an RDD's do not, so an RDD warmed a second pool (a daemon and W workers, ~2.5 CPU s) that no
        epoch ever used. Returns the warmed workers' process ids (none: skipped or failed)."""
        if isinstance(self.op, StatelessOperator):
            return []  # every stage runs in the JVM: no Python worker, no cache
        t0 = time.perf_counter()
        fn = _warm_fn(self.cfg.path, self.cfg.job, cache_dir, store_id)
        try:
            rows = self.spark.range(0, workers, 1, workers).mapInArrow(fn, WARMED_SCHEMA).collect()
        except Exception:
            log.warning("warm-up failed; the first epoch starts the Python workers itself", exc_info=True)
            return []
        pids = sorted({int(r["pid"]) for r in rows})
        log.info("warmed %d Python workers (pids %s) and their caches in %.0f ms", workers, pids,
                 (time.perf_counter() - t0) * 1000)
        return pids

    def plan(self, source_schema: Any, k: int, workers: int, txn: Any = None) -> None:
        """Spark's own first job on a fresh JVM pays class loading and code generation (most of the
        cold first epoch's ~10 s is outside our Python task). Run the epoch's plan once before the
        query starts: the input filter, the operator's keying, the routing columns, the shuffle by
        worker and mapInArrow, over one synthetic row of the first input topic, into a function that
        applies nothing and emits one tick per worker, written by Spark's Kafka sink with the job's
        own producer options: the producer Spark caches per executor is then open when the first
        epoch writes its outputs. Ticks go to `<job>.control.ticks`, which every reader skips.
        With transactional output (`txn`, a spark_jobs.txn_slots.TxnTarget) the routed rows go to
        the epochs' writer instead, told to write nothing (`warm`): each task opens its slot's
        producer (its init and marker read) and the executor keeps it for the first epoch, which
        after a restart otherwise paid them at its end.
        An operator that declares its windows routes the row once more through a synthetic handover
        (`_warm_handover`), into Spark's no-op sink. Hand-off inputs are skipped (their deduplication
        reads the journal). `k`: bits of the map in force. A failure is only logged."""
        if getattr(self.inputs, "handoff", None):
            return
        from pyspark.sql import functions as F

        from spark_jobs.routing import route

        t0 = time.perf_counter()
        try:
            one = self.spark.range(0, 1, 1, 1)
            # not a literal: the optimizer would fold the input filter and drop the plan before codegen
            topic = F.when(F.col("id") < 0, F.lit("")).otherwise(F.lit(self._clients.read_topics[0]))
            fill = {"topic": topic, "value": F.lit(b"{}"), "offset": F.col("id"), "partition": F.lit(0),
                    "timestamp": F.current_timestamp(), "timestampType": F.lit(0)}
            df = one.select(*[(fill[f.name] if f.name in fill else F.lit(None)).cast(f.dataType).alias(f.name)
                              for f in source_schema.fields])
            plan = self.stream_plan  # the epoch's own plan (spark_jobs.stream_plan)
            rows = plan.epoch(plan.stream(df), -1, dead_column=True)
            if isinstance(self.op, StatelessOperator):  # writing none of its one row
                none = rows.where(F.col("__dead") < 0).drop("__dead")
                id_sink.writer(none, -1, self.cfg.bootstrap, self._clients.spark_kafka_options(source=False),
                               self.cfg.output_topic, dlq_topic(self.cfg.job)).save()
                log.info("warmed Spark's epoch plan (code generation, Kafka writer) in %.0f ms",
                         (time.perf_counter() - t0) * 1000)
                return
            tick = (tick_topic(self.cfg.job), message_key(self.cfg.job, self.cfg.operator),
                    tick_message(self.cfg.job, self.cfg.operator, utcnow()))
            routed = route(rows, k, [0] * (1 << k), workers, _emit_tick(*tick), combine=plan.combine)
            if txn is not None:
                txn_output.writer(routed, -1, txn, self._clients.spark_kafka_options(source=False)).option(
                    "warm", "true").save()
            else:
                routed.write.format("kafka").option("kafka.bootstrap.servers", self.cfg.bootstrap).options(
                    **self._clients.spark_kafka_options(source=False)).save()
            log.info("warmed Spark's epoch plan (code generation, shuffle, Arrow) in %.0f ms",
                     (time.perf_counter() - t0) * 1000)
            if self._hands_over():
                t1 = time.perf_counter()
                rule = CopyRule.of(getattr(self.op, "spec", None), EpochClock(-1, 0, 0))
                route(rows, k, [0] * (1 << k), workers, _emit_tick(*tick), (_warm_handover(workers),),
                      rule, plan.combine).write.format("noop").mode("overwrite").save()
                log.info("warmed the handover's routing (the fan-out) in %.0f ms", (time.perf_counter() - t1) * 1000)
        except QueryRefused:
            raise  # the query itself is refused (a stateless query with a generator): say so at start
        except Exception:
            log.warning("Spark plan warm-up failed; the first epoch pays for code generation itself", exc_info=True)

    def _hands_over(self) -> bool:
        """Whether the operator declares its windows, so a step may hand its bins over."""
        spec = getattr(self.op, "spec", None)
        return getattr(spec, "window", None) is not None


def _warm_handover(workers: int) -> BinHandover:
    """A synthetic open handover of bin 0 (worker 0 to the last worker): routing through it makes
    the JVM load and analyse the fan-out (`spark_jobs.handover.fan_out`) before the query starts,
    which a job's first handover paid in its step's epoch (its plan 317 -> 62-71 ms in the full
    handover experiment, bench/REPORT.md §14b). The stage's own generated code is not shared: this
    row comes from a `range`, the epoch's from the Kafka scan, and that stage still runs 200-300 ms
    longer in the step's epoch."""
    return BinHandover(0, 0, workers - 1, 0, 0, 0)


def default_cache_dir(cfg: RunConfig, spark: Any, journal: Journal) -> str | None:
    """`--cache-dir`, else: in local mode with a local checkpoint dir, `<checkpoint>/cache`, so a
    restart finds its caches warm (they are checked against the durable state before use); on
    a cluster None = each executor's own directory."""
    if cfg.cache_dir:
        return cfg.cache_dir
    master = str(spark.sparkContext.master)
    if master.startswith("local") and journal.root.is_local:
        return f"{journal.root.path}/cache"
    return None


#: what each warm-up task returns: the Python worker's process id
WARMED_SCHEMA = "pid INT"


def _warm_fn(operator: str, job: str, cache_dir: str | None, store_id: str) -> Any:
    """The warm-up's mapInArrow function: the task of partition i warms worker slot i."""

    def warm(batches: Any) -> Any:
        import os

        import pyarrow as pa
        from pyspark import TaskContext

        for _ in batches:
            pass
        ctx = TaskContext.get()
        assert ctx is not None, "the warm-up's function runs in a Spark task"
        warm_worker(operator, job, cache_dir, store_id, ctx.partitionId())
        yield pa.record_batch({"pid": pa.array([os.getpid()], pa.int32())})

    return warm


def warm_worker(operator: str, job: str, cache_dir: str | None, store_id: str, index: int) -> None:
    """In a Python worker: import what an epoch's task imports, open worker `index`'s cache and, for a
    fold operator, run one epoch on scratch state."""
    import lmdb  # noqa: F401
    import pyarrow  # noqa: F401
    import pyarrow.compute  # noqa: F401

    from spark_jobs import worker  # noqa: F401
    from spark_jobs.cache import CacheError, WorkerCache, default_cache_root
    from spark_jobs.operator_loader import get_operator

    op = get_operator(operator)
    if store_id:
        try:
            WorkerCache(cache_dir or default_cache_root(job), store_id, job, index).close()
        except CacheError:  # only a warm-up: the first epoch rebuilds it (spark_jobs.cache_fallback)
            pass
    if not hasattr(op, "spec"):  # a fold operator: its first epoch's task path, once, on scratch state
        _warm_task(operator, job, index)


def _warm_task(operator: str, job: str, index: int) -> None:
    """One worker epoch (`spark_jobs.worker._run`: fold, changelog object, cache commit) over one
    synthetic row, against a scratch cache and state directory deleted after: the first real
    epoch's task then finds pyarrow's compute kernels, the IPC writer, numpy and LMDB's first write
    transaction warm (1.2 s of its useful time, against ~20 ms steady, before this). The user's fold
    sees one row, `b"1"` under key `b"ballast-warm-up"`, whatever it makes of it stays in scratch."""
    import shutil
    import tempfile

    import pyarrow as pa

    from spark_jobs import faults
    from spark_jobs.cache import WorkerCache
    from spark_jobs.history import History
    from spark_jobs.worker import ApplyConfig, _run

    scratch = tempfile.mkdtemp(prefix="ballast-warm-up-")
    try:
        cfg = ApplyConfig(epoch=0, job=job, operator=operator, bins_bits=0, workers=index + 1,
                          assignment=(index,), state_uri=scratch, store_id="warm-up", history=History(scratch, (), {}),
                          output_topic="", dlq_topic="")
        one = pa.table({"key": pa.array([b"ballast-warm-up"], pa.binary()), "value": pa.array([b"1"], pa.binary()),
                        "partition": pa.array([0], pa.int32()), "offset": pa.array([0], pa.int64()),
                        "h": pa.array([0], pa.int64()), "bin": pa.array([0], pa.int32()),
                        "worker": pa.array([index], pa.int32())})
        cache = WorkerCache(scratch + "/cache", "warm-up", job, index)
        try:
            with faults.paused():  # crash injection is for real epochs
                cache.write(lambda txn: _run(cfg, cache, txn, index, one, 1, "warm-up", 0.0, 0.0))
        finally:
            cache.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _emit_tick(topic: str, key: bytes, value: bytes) -> Any:
    """The warm-up's mapInArrow function: reads its input, applies nothing, emits one tick record."""

    def fn(batches: Any) -> Any:
        import pyarrow as pa

        from spark_jobs.output import kafka_arrow_schema

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pylist([{"topic": topic, "key": key, "value": value, "headers": []}],
                                         kafka_arrow_schema())

    return fn
