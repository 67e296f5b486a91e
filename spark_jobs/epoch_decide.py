"""Steps 1–2 of an epoch: the records Spark's offset log fixes for it, its control records, and the
decision over them (spark_jobs.control), logged before anything moves; on a replay, the logged one.

A component of `spark_jobs.runner.JobRunner`, like `EpochApply` (steps 3–4) and `EpochCommit`
(step 5): the loop calls `run` and gets an `EpochDecided` back. Safe to redo: the ranges come from
Spark's offset log, the control records are read again from that range, and a decision already in
the journal is reused instead of deciding again (effective_at is compared with the wall clock, so
a second decision could differ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ballast.errors import BallastError
from ballast.store import writer as mx
from spark_jobs import faults
from spark_jobs.control import decide
from spark_jobs.control_handover import HandoverClock
from spark_jobs.control_reader import read_control
from spark_jobs.control_state import EpochControl, initial_state
from spark_jobs.epoch_times import EpochTimes
from spark_jobs.fencing import DriverFence
from spark_jobs.job_clients import JobClients
from spark_jobs.journal import Journal
from spark_jobs.live_code import LiveCode
from spark_jobs.run_config import RunConfig


class EpochUnreadable(BallastError, RuntimeError):
    """Spark's offset log cannot say which records an epoch covers."""


@dataclass(frozen=True)
class EpochDecided:
    """What steps 1–2 hand the loop: the decision and the epoch's input as the offset log fixes it."""

    decision: EpochControl
    replay: bool  # the decision was the journal's (Spark replays the epoch)
    input_rows: int
    control_rows: int
    end_offsets: dict[tuple[str, int], int]  # (input topic, partition) -> the epoch's end offset


class EpochDecide:
    """Reads an epoch's control records and decides, or reuses the logged decision."""

    def __init__(self, cfg: RunConfig, clients: JobClients, journal: Journal, fencing: DriverFence,
                 ctl_topic: str, live_code: LiveCode | None = None) -> None:
        self.cfg = cfg
        self.live_code = live_code  # judges an upgrade's code, tallies a shadow's (spark_jobs.live_code)
        self.clients = clients
        self.journal = journal
        self.fencing = fencing
        self.ctl_topic = ctl_topic
        # what a handover step is judged by at an epoch (set by the runner for a windowed processor)
        self.handover_clock: Callable[[int], HandoverClock] | None = None

    def run(self, epoch: int, started_at: datetime, times: EpochTimes) -> EpochDecided:
        cfg = self.cfg
        ranges = self.clients.offset_ranges(epoch)
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
        records = (self.clients.kafka("the control records", read_control, self.clients.consumer, self.ctl_topic,
                                       control)
                   if control_rows else [])
        times.lap("control")

        # 2) decision: reuse the logged one on replay
        decision = self.journal.load_decision(epoch)
        replay = decision is not None
        if decision is None:
            before = self.journal.state_before(epoch) or initial_state(cfg.bins, cfg.workers)
            decision = decide(before, records, epoch=epoch, now=started_at, job=cfg.job, operator=cfg.operator,
                              max_future_s=cfg.max_future_s, max_message_bytes=cfg.max_control_bytes,
                              keyring=cfg.control_keyring, siblings=frozenset(cfg.siblings),
                              check_code=self.live_code.check if self.live_code else None,
                              shadow_seen=self.live_code.take_seen() if self.live_code else None,
                              handover_clock=self.handover_clock(epoch) if self.handover_clock else None)
            if records or decision.entries or before.queue or self.journal.latest_state() is None:
                self.fencing.guard(f"the decision of epoch {epoch}")  # a stale one would rewrite the newer's
                self.journal.write_decision(decision)
        if decision.entries:  # also on replay: a crash may have come between the file and the rows
            self.clients.db("the decision log", mx.write_step_decisions, cfg.db_url, cfg.job, cfg.operator, epoch,
                            decision.entries, self.fencing.fence)
        faults.hit("after_decision")
        return EpochDecided(decision, replay, input_rows, control_rows, end_offsets)
