"""The job's durable driver-side log, kept next to Spark's checkpoint in the job's checkpoint dir.

    <checkpoint-dir>/spark/                 Spark's own checkpoint (offsets of both topics, commits)
    <checkpoint-dir>/ballast/job.json       what is fixed at the first start (bins, operator, topics)
    <checkpoint-dir>/ballast/decisions/E.json   decision of epoch E + the control state after it
    <checkpoint-dir>/state/                 durable bin state (default --state-uri; spark_jobs.durable)

The checkpoint dir is any URI (`hdfs://`, `s3://`, … or a local path; spark_jobs.storage). Every
file is written atomically, so a crash leaves either the old or the new version. Decisions are
keyed by epoch: a replay of epoch E finds E.json and reuses it rather than deciding again.
"""

from __future__ import annotations

import re
from typing import Any

from ballast.errors import BallastError
from spark_jobs.control_state import ControlState, EpochControl
from spark_jobs.storage import Location

KEEP_EPOCHS = 200


class JobMismatch(BallastError, RuntimeError):
    """The checkpoint dir belongs to a job started with different fixed settings."""


class Journal:
    def __init__(self, checkpoint_dir: str) -> None:
        self.root = Location.of(checkpoint_dir)
        self.dir = self.root / "ballast"
        self.decisions = self.dir / "decisions"
        self.decisions.makedirs()

    @property
    def spark_checkpoint(self) -> Location:
        return self.root / "spark"

    # -- fixed job settings --------------------------------------------------------------------
    def ensure_job(self, fixed: dict[str, Any]) -> dict[str, Any]:
        """Store `fixed` at the first start; afterwards refuse a start whose fixed settings differ."""
        loc = self.dir / "job.json"
        old = loc.read_json()
        if old is None:
            loc.write_json(fixed)
            return fixed
        diff = {k: (old.get(k), v) for k, v in fixed.items() if old.get(k) != v}
        if diff:
            details = ", ".join(f"{k}: checkpoint has {a!r}, start asked for {b!r}" for k, (a, b) in diff.items())
            raise JobMismatch(
                f"checkpoint dir {self.root} was created with different fixed settings ({details}). "
                "The bin count and operator cannot change for an existing job: use the original values "
                "or a new checkpoint dir."
            )
        return dict(old)

    # -- decisions -----------------------------------------------------------------------------
    def _epochs(self) -> list[int]:
        return sorted(int(m.group(1)) for n in self.decisions.list() if (m := re.fullmatch(r"(\d+)\.json", n)))

    def load_decision(self, epoch: int) -> EpochControl | None:
        doc = (self.decisions / f"{epoch:012d}.json").read_json()
        return EpochControl.from_dict(doc) if doc else None

    def state_before(self, epoch: int) -> ControlState | None:
        """Control state after the latest logged epoch before `epoch` (None: first epoch ever)."""
        prior = [e for e in self._epochs() if e < epoch]
        if not prior:
            return None
        d = self.load_decision(prior[-1])
        return d.state_after if d else None

    def latest_state(self) -> ControlState | None:
        es = self._epochs()
        d = self.load_decision(es[-1]) if es else None
        return d.state_after if d else None

    def write_decision(self, d: EpochControl) -> None:
        (self.decisions / f"{d.epoch:012d}.json").write_json(d.to_dict())

    def gc(self, epoch: int) -> None:
        """Keep the last KEEP_EPOCHS epochs of decisions, and always the newest one: quiet epochs
        write no file, so after a long quiet spell the newest file is the job's only state."""
        es = self._epochs()
        for e in es[:-1]:
            if e < epoch - KEEP_EPOCHS:
                (self.decisions / f"{e:012d}.json").delete()
