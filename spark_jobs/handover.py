"""Handover in the data plane: a bin moves at a window boundary, with no state transfer
(docs/handover.md; the rule itself is `ballast.policy.handover`).

From the step's first epoch (`since`) until it completes, the bin's rows reach both owners (the
routing explodes them, `routing_column`). The old owner keeps the bin as it is and folds every row,
so the bin stays whole there if the step is superseded; it keeps the outputs of the timers up to
the boundary (the windows that end by it). The new owner folds the rows from the activation
timestamp on into a *fresh bin*, empty at the step, in its own cache and its own changelog objects
(the bin's batch of the new owner's objects, which no reader of the bin takes while the map names the
old owner), keeps the outputs of the later timers, and writes no dead letters: the old owner sees the
same rows and writes them. Once the watermark the tasks ran at has passed the boundary, the step
applies: the fresh bin is the bin from then on (`BinHandover.completes`), and that epoch takes a
snapshot so that no later reader needs the fresh bin's history.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Role = Literal["old", "new"]


@dataclass(frozen=True)
class BinHandover:
    """One bin's handover as an epoch's tasks see it (the decision's `handover`, same on replay)."""

    bin: int
    src: int  # the old owner
    dst: int  # the new owner
    since: int  # the first epoch whose rows reach both: the fresh bin starts empty there
    activation_ms: int  # the new owner's first window start: it folds rows from here on
    boundary_ms: int  # the end of the old owner's last window
    completes: bool = False  # this epoch applies the step: the fresh bin becomes the bin

    def role(self, worker: int) -> Role | None:
        """The worker's part in this epoch (None: not one of the two, or the step completes now)."""
        if self.completes:
            return None
        return "old" if worker == self.src else "new" if worker == self.dst else None

    def keeps_output(self, role: Role, timer_ms: int) -> bool:
        """A timer's outputs: the old owner's up to the boundary, the new owner's after it."""
        return timer_ms <= self.boundary_ms if role == "old" else timer_ms > self.boundary_ms

    def to_list(self) -> list[int]:
        return [self.bin, self.src, self.dst, self.since, self.activation_ms, self.boundary_ms, int(self.completes)]

    @classmethod
    def from_list(cls, v: list[int]) -> BinHandover:
        b, src, dst, since, activation, boundary, completes = (int(x) for x in v)
        return cls(b, src, dst, since, activation, boundary, bool(completes))


def roles(handovers: Iterable[BinHandover], worker: int) -> dict[int, tuple[Role, BinHandover]]:
    """bin -> (this worker's role, its handover), for the bins this worker shares this epoch."""
    return {h.bin: (r, h) for h in handovers if (r := h.role(worker)) is not None}


def overrides(handovers: Iterable[BinHandover], worker: int) -> dict[int, tuple[int, int]]:
    """How the new owner's `BinSource` rebuilds a fresh bin (also at the completion, when it becomes
    the bin): bin -> (since, the new owner); the new owner's objects from `since` on, never the old
    owner's state."""
    return {h.bin: (h.since, h.dst) for h in handovers if h.dst == worker}


def fan_out(handovers: Iterable[BinHandover]) -> str | None:
    """Spark SQL over the routed rows' `bin` and `worker`: for a bin in an open handover the old and
    the new owner, to `explode`; None when no handover is open (the map's worker alone)."""
    open_ = sorted((h.bin, h.dst) for h in handovers if not h.completes)
    if not open_:
        return None
    cases = " ".join(f"WHEN {int(b)} THEN array(worker, {int(d)})" for b, d in open_)
    return f"explode(CASE bin {cases} ELSE array(worker) END)"


def from_decision(doc: Mapping[str, Any] | None) -> tuple[BinHandover, ...]:
    """The epoch's handovers from its decision's `handover` list."""
    return tuple(BinHandover.from_list(v) for v in (doc or {}).get("bins", []))


def without_fresh_rejects(table: Any, fresh: set[int]) -> Any:
    """A new owner's rows minus the rejected ones of its fresh bins (a value that does not parse, a
    null key): the old owner gets the same rows and writes their dead letters."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from spark_jobs.records import rejected_mask

    if not fresh or table is None or not table.num_rows:
        return table
    drop = pc.and_(rejected_mask(table), pc.is_in(table.column("bin"), value_set=pa.array(sorted(fresh), pa.int32())))
    return table.filter(pc.invert(drop)) if pc.any(drop).as_py() else table
