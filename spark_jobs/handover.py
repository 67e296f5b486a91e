"""Handover in the data plane: a bin moves at a window boundary, with no state transfer
(docs/handover.md; the rule itself is `ballast.policy.handover`).

From the step's first epoch (`since`) until it completes, the bin's rows reach both owners (the
routing explodes them, `routing_column`). The old owner keeps the bin as it is and folds the rows
before the boundary (its windows all end by it; such a handover is not cancelled once started,
spark_jobs.control_handover.runs_on); it keeps the outputs of the timers up to the boundary (the
windows that end by it). The new owner folds the rows from the activation
timestamp on into a *fresh bin*, empty at the step, in its own cache and its own changelog objects
(the bin's batch of the new owner's objects, which no reader of the bin takes while the map names the
old owner), keeps the outputs of the later timers, and writes no dead letters: the old owner sees the
same rows and writes them. Once the watermark the tasks ran at has passed the boundary, the step
applies: the fresh bin is the bin from then on (`BinHandover.completes`), and that epoch's manifest
records where the bin restarted (spark_jobs.history), so no later reader takes the old owner's state
and no snapshot is needed. Session windows (`session_first_ms`
set): the new owner folds the rows from the first event F on, the outputs split per key at its
crossing, and the step also waits for every key the old owner may hold a session of
(spark_jobs.handover_sessions).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ballast.policy.handover import Handover, WindowSpec

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
    # session windows: the first event F (the new owner folds rows from it; activation = boundary =
    # F + gap). Their outputs split per key, not at the boundary (spark_jobs.handover_sessions)
    session_first_ms: int | None = None

    @property
    def folds_from_ms(self) -> int:
        """The new owner's first row time: the activation (grid windows), the first event (sessions)."""
        return self.activation_ms if self.session_first_ms is None else self.session_first_ms

    @property
    def gap_ms(self) -> int | None:
        """A session handover's gap (None: grid windows)."""
        return None if self.session_first_ms is None else self.boundary_ms - self.session_first_ms

    def key_bounds(self, window: WindowSpec | None, key: bytes) -> tuple[int, int]:
        """(first row time the new owner folds, the old owner's last timer) for one key: the bin's,
        or for staggered windows the key's own grid's (`ballast.policy.handover.Handover.for_key`:
        tumbling windows then fold no row twice). `key`: the grouping key as routed (JSON)."""
        if window is None or not window.staggered:
            return self.folds_from_ms, self.boundary_ms
        grid = Handover(window, self.activation_ms - 1, self.activation_ms, self.boundary_ms)
        return grid.key_bounds(window.phase_of(tuple(json.loads(key).values())))

    def role(self, worker: int) -> Role | None:
        """The worker's part in this epoch (None: not one of the two, or the step completes now)."""
        if self.completes:
            return None
        return "old" if worker == self.src else "new" if worker == self.dst else None

    def keeps_output(self, role: Role, timer_ms: int, boundary_ms: int | None = None) -> bool:
        """A timer's outputs (grid windows): the old owner's up to the boundary (the bin's, or a
        staggered key's own: `key_bounds`), the new owner's after it. Sessions split per key at its
        crossing instead (spark_jobs.handover_sessions.keeps)."""
        at = self.boundary_ms if boundary_ms is None else boundary_ms
        return timer_ms <= at if role == "old" else timer_ms > at

    def to_list(self) -> list[int]:
        v = [self.bin, self.src, self.dst, self.since, self.activation_ms, self.boundary_ms, int(self.completes)]
        return v if self.session_first_ms is None else [*v, self.session_first_ms]

    @classmethod
    def from_list(cls, v: list[int]) -> BinHandover:
        """A decision's entry: 7 numbers, or 8 with a session handover's first event."""
        b, src, dst, since, activation, boundary, completes = (int(x) for x in v[:7])
        return cls(b, src, dst, since, activation, boundary, bool(completes), int(v[7]) if len(v) > 7 else None)


def roles(handovers: Iterable[BinHandover], worker: int) -> dict[int, tuple[Role, BinHandover]]:
    """bin -> (this worker's role, its handover), for the bins this worker shares this epoch."""
    return {h.bin: (r, h) for h in handovers if (r := h.role(worker)) is not None}


def overrides(handovers: Iterable[BinHandover], worker: int) -> dict[int, tuple[int, int]]:
    """How the new owner's `BinSource` rebuilds a fresh bin (also at the completion, when it becomes
    the bin): bin -> (since, the new owner); the new owner's objects from `since` on, never the old
    owner's state."""
    return {h.bin: (h.since, h.dst) for h in handovers if h.dst == worker}


def fan_out(handovers: Iterable[BinHandover], bins: int) -> str | None:
    """Spark SQL over the routed rows' `bin` and `worker`: for a bin in an open handover the old and
    the new owner, to `explode`; None when no handover is open (the map's worker alone).

    The new owners are one array constant indexed by bin (-1: none), as the map is
    (spark_jobs.bins.assignment_literal): Spark folds it into a literal that its generated code
    references rather than inlines, so every handover's routing compiles to the same code — one
    `CASE` branch per bin made each new handover's first epoch compile a stage of its own (~0.6 s
    at 64 bins on this machine)."""
    dst = [-1] * bins
    for h in handovers:
        if not h.completes:
            dst[h.bin] = int(h.dst)
    if max(dst, default=-1) < 0:
        return None
    d = "element_at(CAST(split('" + ",".join(map(str, dst)) + "', ',') AS ARRAY<INT>), bin + 1)"
    return f"explode(IF({d} < 0, array(worker), array(worker, {d})))"


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
