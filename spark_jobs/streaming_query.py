"""The job's Structured Streaming query: built from the job's settings, restarted when they change.

Spark fixes a query's trigger interval and its source's `maxOffsetsPerTrigger` for the query's
life. A `settings` step (ballast.protocol.Settings) changes them live: after the epoch that applied
it has committed, this component stops the query and starts it again in the same driver, on the
same checkpoint, with the new values — no process restart, no state reload (the workers' caches,
the Python workers and the durable state stay as they are). Spark re-runs the epoch it had already
planned, with the offsets it logged for it (so the new cap applies from the epoch after that one),
and a batch that begins while the query is being replaced raises `StopRequested` before it touches
anything: Spark commits nothing of it and runs it again on the new query. The old query is stopped once Spark has logged
the settings epoch as committed, so the new one does not run that epoch a second time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ballast.protocol import Settings
from spark_jobs.run_config import RunConfig, tick_topic
from spark_jobs.s3a import explain_spark_storage_error
from spark_jobs.session import for_epochs

log = logging.getLogger("ballast.runner")


@dataclass(frozen=True)
class Effective:
    """The values a query runs with: the configuration's, where no settings step changed them."""

    trigger_ms: int
    max_records_per_epoch: int | None  # None: no cap

    @classmethod
    def of(cls, cfg: RunConfig, settings: Settings) -> Effective:
        s = settings.over(Settings(cfg.trigger_ms, cfg.max_offsets_per_trigger))
        return cls(s.trigger_ms if s.trigger_ms is not None else cfg.trigger_ms, s.max_records_per_epoch or None)


class StreamingQuery:
    """Builds, starts and (for new settings) restarts the runner's one streaming query.

    `build(effective)` returns the source DataFrame (the caller may warm up on it); `start(source,
    effective)` starts the query; `restart(effective)` replaces it on a thread of its own (a query
    cannot be stopped from inside its batch). `replacing` is set from the moment a restart is asked
    for until the new query runs: the runner refuses batches meanwhile, and `await_termination`
    follows the new query instead of ending with the old one.
    """

    def __init__(self, spark: Any, cfg: RunConfig, topics: list[str], control_topic: str, kafka_options: dict[str, str],
                 stream: Callable[[Any], Any], batch: Callable[[Any, int], None], checkpoint: Any,
                 in_batch: threading.Event, stopping: threading.Event) -> None:
        for_epochs(spark)  # before the warm-up or the query plans anything (spark_jobs.session.EPOCH_CONF)
        self.spark, self.cfg = spark, cfg
        self.topics = [*topics, control_topic, tick_topic(cfg.job)]
        self.kafka_options = kafka_options
        self.stream, self.batch, self.checkpoint = stream, batch, checkpoint
        self.in_batch, self.stopping = in_batch, stopping
        self.replacing = threading.Event()
        self.query: Any = None
        self.effective: Effective | None = None
        self.restart_error: BaseException | None = None
        self.restarts = 0

    @property
    def name(self) -> str:
        cfg = self.cfg
        return f"ballast-{cfg.job}" + (f"-{cfg.operator}" if cfg.siblings else "")

    def build(self, effective: Effective) -> Any:
        """The Kafka source over the input topics, the control topic and the tick topic."""
        cfg = self.cfg
        reader = (
            self.spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            .option("subscribe", ",".join(self.topics))
            .option("includeHeaders", "true" if cfg.handoff_inputs else "false")
            .options(**self.kafka_options)
            .option("startingOffsets", cfg.starting_offsets)
            .option("failOnDataLoss", "true" if cfg.fail_on_data_loss else "false")
        )
        if effective.max_records_per_epoch:
            reader = reader.option("maxOffsetsPerTrigger", str(effective.max_records_per_epoch))
        return reader.load()

    def start(self, source: Any, effective: Effective) -> Any:
        try:
            self.query = (
                self.stream(source).writeStream.queryName(self.name)
                .foreachBatch(self.batch)
                .option("checkpointLocation", self.checkpoint.hadoop_uri)  # s3:// is s3a:// to Spark
                .trigger(processingTime=f"{effective.trigger_ms} milliseconds")
                .start()
            )
        except Exception as exc:
            explained = explain_spark_storage_error(exc, self.checkpoint.uri)
            if explained is not None:
                raise explained from exc
            raise
        self.effective = effective
        return self.query

    @property
    def active(self) -> bool:
        """The query runs, or is being replaced by one that will."""
        return self.replacing.is_set() or (self.query is not None and self.query.isActive)

    def restart(self, effective: Effective, epoch: int) -> None:
        """Ask for the query to be replaced with `effective` once the running batch (epoch `epoch`,
        the one that applied the settings step) has returned. Returns at once."""
        self.replacing.set()
        threading.Thread(target=self._replace, args=(effective, epoch), name="ballast-restart", daemon=True).start()

    def _replace(self, effective: Effective, epoch: int) -> None:
        t0 = time.perf_counter()
        try:
            while self.in_batch.is_set():  # the settings epoch returns first; Spark then commits it
                time.sleep(0.01)
            old = self.query
            before = self.effective
            await_commit(old, epoch)
            old.stop()
            if self.stopping.is_set():  # a stop came meanwhile: nothing to start again
                return
            self.start(self.build(effective), effective)
            self.restarts += 1
            log.info("settings applied at epoch %d: streaming query restarted in %.0f ms (trigger %s -> %d ms, "
                     "max records per epoch %s -> %s)", epoch, (time.perf_counter() - t0) * 1000,
                     before.trigger_ms if before else "?", effective.trigger_ms,
                     (before.max_records_per_epoch or "no cap") if before else "?",
                     effective.max_records_per_epoch or "no cap")
        except BaseException as exc:  # the driver ends with it (await_termination raises it)
            log.exception("could not restart the streaming query with the settings of epoch %d", epoch)
            self.restart_error = exc
        finally:
            self.replacing.clear()

    def wait_replaced(self, timeout_s: float) -> None:
        """Until no restart is under way (or `timeout_s`)."""
        deadline = time.time() + timeout_s
        while self.replacing.is_set() and time.time() < deadline:
            time.sleep(0.02)

    def await_termination(self, poll_s: float) -> BaseException | None:
        """Until the query ends for good, following restarts; the failure it ended with, if any."""
        while True:
            q = self.query
            failed: BaseException | None = None
            try:
                while q is not None and q.isActive:
                    q.awaitTermination(poll_s)
            except Exception as e:  # pyspark raises the query's failure here, once it has ended
                failed = e
            if self.replacing.is_set() or q is not self.query:  # replaced: follow the new one
                self.wait_replaced(float("inf"))
                if self.restart_error is not None:
                    return self.restart_error
                continue
            return failed


def await_commit(query: Any, epoch: int, timeout_s: float = 30.0) -> None:
    """Until Spark has logged epoch `epoch` as committed: its progress reports the batch, or the
    query ended (the next batch refused to run while the query is replaced, which Spark starts only
    after that commit). Stopped before it, the new query would run the whole epoch again (the
    autotune benchmark saw that: ~1 s more pause per settings change). After `timeout_s` it stops
    anyway: a second run of an epoch Ballast committed is a replay, which its journal makes exact."""
    deadline = time.time() + timeout_s
    while query.isActive and time.time() < deadline:
        progress = query.lastProgress
        if progress is not None and int(progress.get("batchId", -1)) >= epoch:
            return
        time.sleep(0.01)
