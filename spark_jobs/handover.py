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
from spark_jobs.sql_text import int_array, text

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


def fan_out(handovers: Iterable[BinHandover], bins: int, bin_col: str = "bin",
            worker_col: str = "worker") -> str | None:
    """Spark SQL over the routed rows' bin and worker (columns `bin_col`, `worker_col`): for a bin in an
    open handover the old and the new owner, to `posexplode` (copy 0: the old owner's, 1: the new
    owner's; a bin in none: its worker's, copy 0); None when no handover is open (the map's worker alone).

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
    d = _per_bin(dst, "INT", bin_col)
    return f"posexplode(IF({d} < 0, array({worker_col}), array({worker_col}, {d})))"


@dataclass(frozen=True)
class CopyRule:
    """What the routing needs to drop, in the JVM, the copy of a handed-over bin's row that its
    owner would skip in Python (`copies_kept`): the query's windows and the epoch's clock (the
    driver's, the same on a replay), so that no row whose dead letter the old owner writes is dropped."""

    window: WindowSpec
    watermark_ms: int
    ahead_limit_ms: int | None  # processing time + max_ahead_ms (None: no limit)

    @classmethod
    def of(cls, spec: Any, clock: Any) -> CopyRule | None:
        """The epoch's rule from the query's `spec` (QuerySpec) and the epoch's `clock`
        (spark_jobs.timers.EpochClock); None: a query without windows (no handover), or no clock."""
        window = getattr(spec, "window", None)
        if window is None or clock is None:
            return None
        ahead = spec.max_ahead_ms
        return cls(window, int(clock.watermark_ms), None if ahead is None else int(clock.processing_ms) + int(ahead))


# a staggered key's phase needs its grouping key's values as Python's compact JSON list; Spark's
# to_json writes the same bytes for integers, booleans and printable ASCII strings without a quote
# or a backslash. Other keys get the bin's bounds, which contain every key's own (a superset)
_SCALAR = r'(-?[0-9]+|true|false|"[\x20\x21\x23-\x5b\x5d-\x7e]*")'
_NAME = r'"[^"\\]*":'  # a field name as to_json writes it (an escaped quote in it: not safe)
SAFE_KEY = rf'^[{{]{_NAME}{_SCALAR}(,{_NAME}{_SCALAR})*[}}]$'  # a Java regex


def _per_bin(values: Iterable[int], kind: str = "BIGINT", bin_col: str = "bin") -> str:
    """Spark SQL: the routed row's bin's entry of a per-bin constant (`int_array`: one literal that
    generated code references, so new values reuse the code)."""
    return f"element_at({int_array(values, kind)}, {bin_col} + 1)"


def key_phase_sql(window: WindowSpec, key: str = "key") -> str:
    """Spark SQL: a staggered key's phase (`WindowSpec.phase_of`) from its routed JSON `key`
    (binary), or NULL where Spark's bytes could differ from Python's (`SAFE_KEY`)."""
    k = f"CAST({key} AS STRING)"
    values = f"concat('[', regexp_replace(substr({k}, 2, length({k}) - 2), {text(_NAME)}, ''), ']')"
    return f"CASE WHEN {k} RLIKE {text(SAFE_KEY)} THEN crc32(CAST({values} AS BINARY)) % {int(window.slide)} END"


@dataclass(frozen=True)
class Copies:
    """`copies_kept`'s Spark SQL: `columns` to add to the fanned-out rows first (each computed once
    per row), then the predicate `keep` over them."""

    columns: tuple[str, ...]
    keep: str


def copies_kept(handovers: Iterable[BinHandover], bins: int, rule: CopyRule, event_ms: str) -> Copies | None:
    """Which of `fan_out`'s rows (`copy`: 0 the old owner's, 1 the new owner's; `bin`, `key`) to keep,
    given the row's event time `event_ms` (NULL: a row its worker rejects or does not decode). The
    new owner gets a row only from its key's first row time on (`key_bounds`); the old owner loses
    only a row after its key's boundary that it would neither fold nor dead-letter (not late, not too
    far ahead; a session handover's old owner keeps every row). Only rows an owner skips in Python
    (spark_jobs.processing) are dropped, so what either owner does is unchanged (the new owner still
    skips the late and far-ahead rows itself). None: no open handover.

    Per bin, the bounds and the epoch's clock are array literals (`_per_bin`): Spark references them
    from its generated code, so every epoch and every handover runs the same code (a constant, or an
    element at a constant index, which Spark folds, would be inlined and compiled anew)."""
    hs = [h for h in handovers if not h.completes]
    if not hs:
        return None
    never = -(1 << 62)  # the old owner's copy is dropped only at or below `ahead`: never for these bins
    lo, hi, act1, ahead = [0] * bins, [0] * bins, [0] * bins, [never] * bins
    limit = (1 << 62) if rule.ahead_limit_ms is None else rule.ahead_limit_ms
    w, et = rule.window, event_ms
    for h in hs:
        lo[h.bin], act1[h.bin] = h.folds_from_ms, h.activation_ms - 1
        # a row below the watermark is late, a dead letter of the old owner's: its floor
        hi[h.bin] = h.boundary_ms if w.staggered else max(h.boundary_ms, rule.watermark_ms)
        ahead[h.bin] = never if h.session_first_ms is not None else limit
    lo_k, hi_k = _per_bin(lo), _per_bin(hi)
    columns: tuple[str, ...] = ()
    if w.staggered:
        # the key's own grid (Handover.key_bounds): its last window start before the activation,
        # (activation - 1) - pmod(activation - 1 - offset - phase, slide); NULL where the JVM has no phase
        a1, sl = _per_bin(act1), int(w.slide)
        columns = (f"{a1} - pmod({a1} - {int(w.offset_ms)} - ({key_phase_sql(w)}), {sl}) AS {GRID_START}",)
        wm = _per_bin([rule.watermark_ms] * bins)
        lo_k = f"coalesce({GRID_START} + {sl}, {lo_k})"
        hi_k = f"greatest(coalesce({GRID_START} + {int(w.length_ms)}, {hi_k}), {wm})"
    old_skips = f"{et} IS NOT NULL AND {et} >= {hi_k} AND {et} <= {_per_bin(ahead)}"
    new_folds = f"{et} IS NOT NULL AND {et} >= {lo_k}"
    return Copies(columns, f"CASE copy WHEN 0 THEN NOT ({old_skips}) WHEN 1 THEN {new_folds} ELSE true END")


GRID_START = "__grid_start"  # copies_kept's column: a staggered key's last window start before the activation


def event_ms(spec: Any, ts_columns: Iterable[str], cols: Iterable[Any], ok: Any) -> list[Any]:
    """A processor's routed EVENT_MS_COLUMN (a list of the one Spark Column) when its query has windows (a bin may
    move by handover): the event time `decode_row` would return, null where the worker would reject
    the row (a timestamp outside a Python datetime) or `ok` (not rejected already) is false. []: no
    windows, or an event-time column neither a timestamp nor an integer (each owner then skips the
    rows itself and the routing keeps both copies). `spec`: its QuerySpec; `cols`: the parsed rows'
    fields; `ts_columns`: those of them the routed JSON carries as epoch ms."""
    from pyspark.sql import functions as F

    from spark_jobs.records import DATETIME_MAX_MS, DATETIME_MIN_MS, EVENT_MS_COLUMN

    et_col, ts = spec.event_time_column, tuple(ts_columns)
    if spec.window is None or et_col is None:
        return []
    if et_col in ts:
        et = F.unix_millis(F.col(et_col))
    elif {f.name: f.dataType.typeName() for f in cols}.get(et_col) in ("long", "integer", "short", "byte"):
        et = F.col(et_col).cast("long")
    else:
        return []
    for c in ts:
        ok = ok & (F.col(c).isNull() | F.unix_millis(F.col(c)).between(DATETIME_MIN_MS, DATETIME_MAX_MS))
    return [F.when(ok, et).alias(EVENT_MS_COLUMN)]


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
