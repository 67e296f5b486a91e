"""The job's durable driver-side log, kept next to Spark's checkpoint in the job's checkpoint dir.

    <checkpoint-dir>/spark/                 Spark's own checkpoint (offsets of both topics, commits)
    <checkpoint-dir>/ballast/job.json       what is fixed at the first start (bins, operator, topics)
    <checkpoint-dir>/ballast/decisions/E.json   decision of epoch E + the control state after it
    <checkpoint-dir>/ballast/moves/E.json   the moves of epoch E finished (with their stats)
    <checkpoint-dir>/state/worker-NNNN/     per-worker LMDB stores (default --state-dir)

Every file is written atomically (temp file, fsync, rename, fsync of the directory), so a crash
leaves either the old or the new version. Decisions are keyed by epoch: a replay of epoch E finds
E.json and reuses it rather than deciding again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from spark_jobs.control import ControlState, Decision

KEEP_EPOCHS = 200


def atomic_write_json(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump(doc, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


class JobMismatch(RuntimeError):
    """The checkpoint dir belongs to a job started with different fixed settings."""


class Journal:
    def __init__(self, checkpoint_dir: str | Path) -> None:
        self.root = Path(checkpoint_dir)
        self.dir = self.root / "ballast"
        self.decisions = self.dir / "decisions"
        self.moves = self.dir / "moves"
        self.decisions.mkdir(parents=True, exist_ok=True)
        self.moves.mkdir(parents=True, exist_ok=True)

    @property
    def spark_checkpoint(self) -> Path:
        return self.root / "spark"

    # -- fixed job settings --------------------------------------------------------------------
    def ensure_job(self, fixed: dict[str, Any]) -> dict[str, Any]:
        """Store `fixed` at the first start; afterwards refuse a start whose fixed settings differ."""
        path = self.dir / "job.json"
        old = _read(path)
        if old is None:
            atomic_write_json(path, fixed)
            return fixed
        diff = {k: (old.get(k), v) for k, v in fixed.items() if old.get(k) != v}
        if diff:
            details = ", ".join(f"{k}: checkpoint has {a!r}, start asked for {b!r}" for k, (a, b) in diff.items())
            raise JobMismatch(
                f"checkpoint dir {self.root} was created with different fixed settings ({details}). "
                "The bin count and operator cannot change for an existing job: use the original values "
                "or a new checkpoint dir."
            )
        return old

    # -- decisions -----------------------------------------------------------------------------
    def _epochs(self, d: Path) -> list[int]:
        return sorted(int(m.group(1)) for p in d.iterdir() if (m := re.fullmatch(r"(\d+)\.json", p.name)))

    def load_decision(self, epoch: int) -> Decision | None:
        doc = _read(self.decisions / f"{epoch:012d}.json")
        return Decision.from_dict(doc) if doc else None

    def state_before(self, epoch: int) -> ControlState | None:
        """Control state after the latest logged epoch before `epoch` (None: first epoch ever)."""
        prior = [e for e in self._epochs(self.decisions) if e < epoch]
        if not prior:
            return None
        d = self.load_decision(prior[-1])
        return d.state_after if d else None

    def latest_state(self) -> ControlState | None:
        es = self._epochs(self.decisions)
        d = self.load_decision(es[-1]) if es else None
        return d.state_after if d else None

    def write_decision(self, d: Decision) -> None:
        atomic_write_json(self.decisions / f"{d.epoch:012d}.json", d.to_dict())

    # -- moves ---------------------------------------------------------------------------------
    def load_moves(self, epoch: int) -> dict[str, Any] | None:
        return _read(self.moves / f"{epoch:012d}.json")

    def write_moves(self, epoch: int, doc: dict[str, Any]) -> None:
        atomic_write_json(self.moves / f"{epoch:012d}.json", doc)

    def gc(self, epoch: int) -> None:
        """Keep the last KEEP_EPOCHS epochs of decisions, and always the newest one: quiet epochs
        write no file, so after a long quiet spell the newest file is the job's only state."""
        for d in (self.decisions, self.moves):
            es = self._epochs(d)
            for e in es[:-1]:
                if e < epoch - KEEP_EPOCHS:
                    (d / f"{e:012d}.json").unlink(missing_ok=True)
