"""Multi-operator jobs: a chain of stateful operators in one Spark application.

Each operator is its own migratable unit — its own bins, routing map, control steps, step
checkpoints, metrics and plans, keyed by (job, operator name) — because each runs its own
`JobRunner` epoch loop (one streaming query, foreachBatch) in the shared SparkSession. Operator i
writes its outputs to the hand-off topic `<job>.<name>.out` (ballast.topics.handoff_topic), which
operator i+1 reads; the last one writes `<job>.output`. Exactly once holds per operator by the
single-operator mechanism, and across a hand-off by the reader's deduplication of re-emitted
outputs (spark_jobs.inputs). All operators share `<job>.control`: each skips its siblings' steps.

Layout under the job's checkpoint dir: `ballast/job.json` (the chain, fixed at the first start),
`ballast/STOP` (`cli stop`), and one single-operator checkpoint dir per operator, `<name>/`
(its own Spark checkpoint, journal and, unless `--state-uri`, state; `--state-uri U` → `U/<name>`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

from ballast.errors import BallastError
from ballast.topics import create_missing_topics, handoff_topic
from spark_jobs.journal import Journal
from spark_jobs.records import MAX_RECORD_BYTES
from spark_jobs.runner import JobRunner, RunConfig

log = logging.getLogger("ballast.chain")

_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


class ChainError(BallastError, ValueError):
    """A chain of operators that cannot run as given."""


@dataclass(frozen=True)
class OperatorSpec:
    """One operator of a job: its name (metrics DB, control protocol, topics) and import path."""

    name: str
    path: str

    @staticmethod
    def parse(text: str) -> OperatorSpec:
        """`name=path` or `path` (name: a shipped operator's name, else the class name, lower-cased)."""
        name, sep, path = text.partition("=")
        if not sep:
            path = text
            name = text.rsplit(":", 1)[-1].lower() if ":" in text else text
        if not _NAME.fullmatch(name):
            raise ChainError(f"operator name {name!r} (from {text!r}): use letters, digits, '_' or '-' "
                             "(it names topics and metrics rows); write NAME=PATH")
        return OperatorSpec(name, path)


def check_unique(specs: list[OperatorSpec]) -> None:
    """Operator names key topics, checkpoints and metrics rows: two alike would share them."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ChainError(f"operator names must be unique in a job, got {names}")


def operator_configs(base: RunConfig, specs: list[OperatorSpec]) -> list[RunConfig]:
    """One RunConfig per operator: its checkpoint/state/cache dirs, input and output topics."""
    check_unique(specs)
    names = [s.name for s in specs]
    out: list[RunConfig] = []
    for i, s in enumerate(specs):
        last = i == len(specs) - 1
        prev = handoff_topic(base.job, specs[i - 1].name) if i else None
        out.append(replace(
            base, operator=s.name, operator_path=s.path,
            checkpoint_dir=f"{base.checkpoint_dir.rstrip('/')}/{s.name}",
            state_uri=f"{base.state_uri.rstrip('/')}/{s.name}" if base.state_uri else None,
            cache_dir=f"{base.cache_dir.rstrip('/')}/{s.name}" if base.cache_dir else None,
            input_topic=prev or base.input_topic, handoff_inputs=(prev,) if prev else (),
            output=None if last else handoff_topic(base.job, s.name),
            siblings=tuple(n for n in names if n != s.name)))
    return out


class ChainRunner:
    """The operators' runners, started, stopped and awaited together (JobRunner's interface)."""

    def __init__(self, spark: Any, base: RunConfig, specs: list[OperatorSpec]) -> None:
        self.spark, self.base, self.specs = spark, base, specs
        self.configs = operator_configs(base, specs)
        self.journal = Journal(base.checkpoint_dir)
        self.runners = [JobRunner(spark, c) for c in self.configs]
        self._stopping = threading.Event()

    def start(self) -> None:
        b = self.base
        self.journal.ensure_job({"job": b.job, "operators": [[s.name, s.path] for s in self.specs],
                                 "bins": b.bins, "input_topic": b.input_topic})
        (self.journal.dir / "STOP").delete()
        handoffs = [c.output_topic for c in self.configs[:-1]]
        create_missing_topics(b.bootstrap, {t: b.output_partitions for t in handoffs}, security=b.security,
                              configs={t: {"max.message.bytes": str(MAX_RECORD_BYTES)} for t in handoffs})
        for r in self.runners:
            r.start()
        threading.Thread(target=self._watch_stop_file, name="ballast-chain-stop", daemon=True).start()

    def _watch_stop_file(self) -> None:
        stop = self.journal.dir / "STOP"
        while not self._stopping.is_set():
            time.sleep(0.5)
            if stop.exists():
                log.info("stop file %s found: stopping every operator after its current epoch", stop)
                self.request_stop()

    def request_stop(self) -> None:
        self._stopping.set()
        for r in self.runners:
            r.request_stop()

    def stop(self, timeout_s: float = 120.0) -> None:
        self._stopping.set()
        for r in self.runners:
            r.stop(timeout_s)

    def await_termination(self, poll_s: float = 1.0) -> None:
        """Until every operator's query ended; a failed one stops the others (then raises)."""
        while any(r.running for r in self.runners):
            for r in self.runners:
                if not r.running and r.query is not None and r.query.exception() is not None:
                    if not self._stopping.is_set():
                        log.error("operator %s failed; stopping the job's other operators", r.cfg.operator)
                        self.request_stop()
            time.sleep(poll_s)
        for r in self.runners:
            r.await_termination(poll_s)

    def runner(self, name: str) -> JobRunner:
        return self.runners[[s.name for s in self.specs].index(name)]


def start_chain(spark: Any, base: RunConfig, specs: list[OperatorSpec]) -> ChainRunner:
    """Start a multi-operator job in this process (tests, notebooks); `.stop()` ends it."""
    chain = ChainRunner(spark, base, specs)
    chain.start()
    return chain
