"""Handover: move a windowed operator's bin at a window boundary, with no state transfer (UniMiCo).

A windowed operator's state expires on its own. Instead of moving a bin's state, the old owner
finishes the windows that started up to the *migration timestamp* and the new owner builds the
later windows from the input itself; where windows overlap (sliding windows) the bin's rows go to
both for a while. Nothing is copied, and the outputs are those of a run without a migration
(docs/handover.md has the protocol and a worked example of the timestamps).

Everything here is event time in milliseconds, on the grid of the *controlling window operator*
(the job's last window operator): windows start at `offset + k·slide` and last `length`. Four
numbers decide a handover (`Handover`):
- `migration_ms` (UniMiCo's ts_mi): the start of the last window the old owner finishes;
- `activation_ms` = migration + slide: the first window the new owner owns, and the first event
  time it needs (it discards every earlier row);
- `boundary_ms` = migration + length: the end of the old owner's last window; the old owner needs
  the rows before it, fires the timers up to it and nothing later;
- completion: the watermark reaches `boundary_ms` (Ballast's watermark already trails the largest
  event time by the allowed lateness, so no later row can join the old owner's windows).

Rows with activation ≤ t < boundary (length − slide of event time; none for tumbling windows) go
to both owners. A timer outside an owner's range still fires (its handler clears the window's
state) but its outputs are discarded: that is UniMiCo's duplicate suppression, for aggregates and
for a windowed join alike, as long as the operator emits a window's results from its event-time
timer at the window's end (Ballast's windowed operators do; the NEXMark ones too).

Session windows have no grid; their rule is per session (`session_owner`). Pure Python, no
framework import.
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

Mode = Literal["transfer", "precopy", "handover"]
MODES: tuple[Mode, ...] = ("transfer", "precopy", "handover")


@dataclass(frozen=True)
class WindowSpec:
    """The controlling window operator's windows: tumbling (`slide_ms` None or = `length_ms`),
    sliding (`slide_ms` < `length_ms`), or session (`gap_ms` set; length and slide unused: 0).

    `staggered`: each key's grid is shifted by a phase of its own in [0, slide) (Flink's
    `WindowStagger`), so windows close spread over the slide instead of all keys at one instant.
    The phase is the framework's (`phase_of`), and the processor places its windows with it, so
    a handover can compute each key's own timestamps (`Handover.for_key`); the bin as a whole
    takes the grid-free ones (`Handover.at`)."""

    length_ms: int
    slide_ms: int | None = None
    offset_ms: int = 0  # window starts are offset + k·slide (Spark's window startTime)
    gap_ms: int | None = None
    staggered: bool = False

    def __post_init__(self) -> None:
        if self.gap_ms is not None:
            if self.gap_ms <= 0:
                raise ValueError(f"a session window's gap must be > 0 ms, got {self.gap_ms}")
            if self.staggered:
                raise ValueError("session windows have no grid to stagger")
            return
        if self.length_ms <= 0:
            raise ValueError(f"a window's length must be > 0 ms, got {self.length_ms}")
        if not 0 < self.slide <= self.length_ms:
            raise ValueError(f"a window's slide must be in 1..length ({self.length_ms} ms), got {self.slide_ms}: "
                             "a slide longer than the window skips rows, which a handover cannot reproduce")

    @property
    def slide(self) -> int:
        return self.length_ms if self.slide_ms is None else self.slide_ms

    @property
    def kind(self) -> Literal["tumbling", "sliding", "session"]:
        if self.gap_ms is not None:
            return "session"
        return "tumbling" if self.slide == self.length_ms else "sliding"

    def phase_of(self, key: Sequence[Any]) -> int:
        """A key's phase (ms in [0, slide)): its grouping key's values as compact JSON, CRC-32, modulo
        the slide — the same in every process (not Python's salted hash); 0 unless staggered."""
        if not self.staggered:
            return 0
        return zlib.crc32(json.dumps(list(key), separators=(",", ":")).encode()) % self.slide

    def starts_containing(self, t: int, phase_ms: int = 0) -> list[int]:
        """The starts of the windows that contain event time `t` (one for tumbling windows); a
        staggered key's grid is shifted by its `phase_ms`."""
        if self.gap_ms is not None:
            raise ValueError("session windows have no fixed starts: see session_owner")
        s, first, offset = self.slide, t - self.length_ms + 1, self.offset_ms + phase_ms
        k = -((offset - first) // s)  # ceil((first - offset) / s)
        start = offset + k * s
        return list(range(start, t + 1, s))


def migration_timestamp(spec: WindowSpec, first_event_ms: int, last_window_start_ms: int | None = None) -> int:
    """UniMiCo's ts_mi (its Eq. 1, time-based windows): the start of the last window the old owner
    finishes, given the first event time from which the new owner sees every row (`first_event_ms`)
    and the start of the last window the old owner produced.

    When that window starts at or after `first_event_ms`, it is ts_mi. Otherwise ts_mi is the last
    window start before `first_event_ms`: first − δ with δ = (first − last) mod slide, or the slide
    when that is 0. Without `last_window_start_ms` the grid's offset anchors the same rule. With
    several inputs (a join), pass the largest of their first event times."""
    if spec.gap_ms is not None:
        raise ValueError("session windows have no migration timestamp on a grid: see session_owner")
    if last_window_start_ms is not None and first_event_ms <= last_window_start_ms:
        return last_window_start_ms
    anchor = spec.offset_ms if last_window_start_ms is None else last_window_start_ms
    return _start_before(first_event_ms, anchor, spec.slide)


def _start_before(t: int, anchor_ms: int, slide: int) -> int:
    """The last window start strictly before `t` on the grid `anchor + k·slide`."""
    r = (t - anchor_ms) % slide
    return t - (slide if r == 0 else r)


@dataclass(frozen=True)
class Handover:
    """One bin's handover; see the module docstring for the four timestamps."""

    spec: WindowSpec
    migration_ms: int
    activation_ms: int
    boundary_ms: int

    @classmethod
    def at(cls, spec: WindowSpec, first_event_ms: int, last_window_start_ms: int | None = None) -> Handover:
        """The handover of a step whose new owner sees every row from `first_event_ms` on. In a Ballast
        job that is one past the largest event time the job read before the step's epoch: every later
        row arrives in the step's epoch or after, when the new owner already receives the bin.

        Staggered windows have no grid common to the bin's keys, so the timestamps are grid-free:
        migration = first − 1, activation = first, boundary = first − 1 + length. A window that ends
        by the boundary started before `first_event_ms` (the old owner folded all its rows); a later
        one starts at `first_event_ms` or after (the new owner folds every row from there). The
        price: the overlap is a whole window length, whatever each key's phase."""
        if spec.gap_ms is not None:
            return cls(spec, first_event_ms, first_event_ms + spec.gap_ms, first_event_ms + spec.gap_ms)
        if spec.staggered:  # no common grid: the latest any key's last old window may start
            return cls(spec, first_event_ms - 1, first_event_ms, first_event_ms - 1 + spec.length_ms)
        mi = migration_timestamp(spec, first_event_ms, last_window_start_ms)
        return cls(spec, mi, mi + spec.slide, mi + spec.length_ms)

    def for_key(self, phase_ms: int) -> Handover:
        """A staggered bin's handover as one key sees it, on its own grid (shifted by its phase): the
        same first event (the grid-free activation), that grid's timestamps. Tumbling windows then
        overlap nothing, as on a common grid, where the grid-free timestamps overlap a whole window.
        The key's boundary is at most the bin's, so the bin completes by the bin's boundary."""
        if not self.spec.staggered:
            return self
        grid = dataclasses.replace(self.spec, offset_ms=self.spec.offset_ms + phase_ms, staggered=False)
        return Handover.at(grid, self.activation_ms)

    def key_bounds(self, phase_ms: int) -> tuple[int, int]:
        """`for_key(phase_ms)`'s (activation, boundary), in integer arithmetic: the data plane asks
        it for every key of a handed-over bin in every epoch of the overlap, where building two
        dataclasses per key was a third of the new owner's extra Python time (py-spy, bench §14b)."""
        if not self.spec.staggered:
            return self.activation_ms, self.boundary_ms
        migration = _start_before(self.activation_ms, self.spec.offset_ms + phase_ms, self.spec.slide)
        return migration + self.spec.slide, migration + self.spec.length_ms

    @property
    def overlap_ms(self) -> int:
        """Event time whose rows both owners process (0 for tumbling windows)."""
        return max(0, self.boundary_ms - self.activation_ms)

    def to_old(self, event_ms: int) -> bool:
        """The old owner needs the row (its windows end at the boundary; a session may run past it:
        the old owner keeps the bin's rows until it is complete, and keeps only its sessions)."""
        return self.spec.gap_ms is not None or event_ms < self.boundary_ms

    def to_new(self, event_ms: int) -> bool:
        """The new owner needs the row. For sessions it needs every row from `migration_ms` (the
        first event time it sees), to tell where a session starts."""
        if self.spec.gap_ms is not None:
            return event_ms >= self.migration_ms
        return event_ms >= self.activation_ms

    def old_emits(self, window_end_ms: int) -> bool:
        """The old owner keeps the outputs of a window (its timer at the window's end) that ends by the boundary."""
        return window_end_ms <= self.boundary_ms

    def new_emits(self, window_end_ms: int) -> bool:
        """The new owner keeps the outputs of every later window."""
        return window_end_ms > self.boundary_ms

    def complete(self, watermark_ms: int) -> bool:
        """The old owner's last window has closed: no row can reach it any more, its timer has fired.
        Session windows complete per session (`session_closed`); this is their earliest moment."""
        return watermark_ms >= self.boundary_ms

    def session_owner(self, session_start_ms: int) -> Literal["old", "new"]:
        """Session windows (the rule, docs/handover.md): a session belongs to the owner of the
        moment it started. The new owner sees every row from `migration_ms` on, so it can tell that
        a row starts a session (no row of the key in the gap before it) from `activation_ms` =
        migration + gap on; a session that started earlier, however long it runs on, is the old
        owner's. Both owners see the same rows in the overlap, so they split the sessions alike."""
        if self.spec.gap_ms is None:
            raise ValueError("session_owner is for session windows")
        return "old" if session_start_ms < self.activation_ms else "new"


def session_closed(last_event_ms: int, gap_ms: int, watermark_ms: int) -> bool:
    """A session is closed once the watermark is a gap past its last row: no later row can extend it."""
    return watermark_ms >= last_event_ms + gap_ms


def pair_windows(spec: WindowSpec, t1: int, t2: int) -> list[int]:
    """The starts of the windows a join pair (rows at t1 and t2) is a result of: those containing both."""
    a, b = sorted((t1, t2))
    return [s for s in spec.starts_containing(a) if s + spec.length_ms > b]


@dataclass(frozen=True)
class BinCosts:
    """What the planner knows of one bin when it chooses how to move it."""

    bin: int
    state_bytes: int
    changed_bytes_per_epoch: float = 0.0  # what a pre-copy replays at its cut-over, per epoch it waits
    windowed: bool = False  # the operator declares its controlling windows (a handover is possible)
    handover_wait_s: float = 0.0  # until the old owner's last window closes (see handover_wait_s)
    no_handover: str = ""  # why a windowed operator's bin still cannot be handed over (e.g. session windows)


@dataclass(frozen=True)
class ModeChoice:
    bin: int
    mode: Mode
    reason: str
    pause_ms: float  # the predicted pause of the bin's cut-over
    bytes_moved: int


def handover_wait_s(h: Handover, watermark_ms: int, event_time_rate: float = 1.0, epoch_s: float = 0.5) -> float:
    """Wall seconds until the handover completes: the event time the watermark still has to cover
    (the old owner's last window end minus the watermark), at the rate event time advances per
    wall second (1 for a live stream, more while a backlog is read), plus the epoch that sees it."""
    if event_time_rate <= 0:
        raise ValueError(f"event_time_rate must be > 0, got {event_time_rate}")
    return max(0.0, (h.boundary_ms - watermark_ms) / 1000.0) / event_time_rate + epoch_s


def estimated_wait_s(spec: WindowSpec, lateness_ms: int, epoch_s: float = 0.5, event_time_rate: float = 1.0) -> float:
    """`handover_wait_s` without a watermark: the boundary lies at most one window length (a gap, for
    sessions) past the largest event time the job read, and the watermark trails that by the lateness,
    so the watermark has at most length + lateness of event time to cover."""
    if lateness_ms < 0:
        raise ValueError(f"lateness_ms must be >= 0, got {lateness_ms}")
    span = spec.gap_ms if spec.gap_ms is not None else spec.length_ms
    return handover_wait_s(Handover(spec, 0, 0, span), -lateness_ms, event_time_rate, epoch_s)


def choose_mode(c: BinCosts, pause_ms_per_byte: float, fixed_ms: float, pause_budget_ms: float,
                step_budget_s: float, forced: Mode | None = None) -> ModeChoice:
    """Transfer, pre-copy or handover for one bin, by the cost model.

    - A transfer pauses the bin's cut-over for fixed + bytes·b (the fitted cost model's a and b) and
      is done in one epoch: chosen when that fits the pause budget.
    - A handover moves 0 bytes and pauses nothing, but the old owner keeps the bin until its open
      windows close, and both owners process the overlap: chosen when the bin's operator is windowed
      and that wait fits the step budget.
    - A pre-copy warms the bin first and replays one epoch's changes at the cut-over: the fallback.
    `forced` (a manual run) wins, except a handover of an operator without declared windows (or one
    that `no_handover` rules out)."""
    transfer_ms = fixed_ms + pause_ms_per_byte * c.state_bytes
    precopy_ms = fixed_ms + pause_ms_per_byte * c.changed_bytes_per_epoch
    if forced is not None:
        if forced not in MODES:
            raise ValueError(f"unknown move mode {forced!r}; expected one of {MODES}")
        if forced == "handover" and not c.windowed:
            raise ValueError(f"bin {c.bin}: a handover needs the operator's windows (QuerySpec.window); this "
                             "operator declares none: move it by transfer or pre-copy")
        if forced == "handover" and c.no_handover:
            raise ValueError(f"bin {c.bin}: {c.no_handover}: move it by transfer or pre-copy")
        pause = {"transfer": transfer_ms, "precopy": precopy_ms, "handover": 0.0}[forced]
        return ModeChoice(c.bin, forced, f"{forced}: forced by the run", pause,
                          0 if forced == "handover" else c.state_bytes)
    if transfer_ms <= pause_budget_ms:
        return ModeChoice(c.bin, "transfer", f"transfer: {c.state_bytes} bytes pause ~{transfer_ms:.0f} ms, within "
                          f"the {pause_budget_ms:.0f} ms pause budget", transfer_ms, c.state_bytes)
    if c.windowed and not c.no_handover and c.handover_wait_s <= step_budget_s:
        return ModeChoice(c.bin, "handover", f"handover: a transfer would pause ~{transfer_ms:.0f} ms (budget "
                          f"{pause_budget_ms:.0f}); the open windows close in ~{c.handover_wait_s:.1f} s, within "
                          f"the {step_budget_s:.0f} s step budget, and nothing is copied", 0.0, 0)
    why = ("the operator declares no windows" if not c.windowed else c.no_handover if c.no_handover else
           f"its windows close in ~{c.handover_wait_s:.1f} s, past the {step_budget_s:.0f} s step budget")
    return ModeChoice(c.bin, "precopy", f"pre-copy: a transfer would pause ~{transfer_ms:.0f} ms (budget "
                      f"{pause_budget_ms:.0f}) and no handover ({why}); the cut-over replays ~"
                      f"{c.changed_bytes_per_epoch:.0f} bytes (~{precopy_ms:.0f} ms)", precopy_ms, c.state_bytes)


def choose_modes(bins: Sequence[BinCosts], pause_ms_per_byte: float, fixed_ms: float, pause_budget_ms: float,
                 step_budget_s: float, forced: Mode | None = None) -> list[ModeChoice]:
    """`choose_mode` for every bin of a step (the dry run lists them with their reasons)."""
    return [choose_mode(c, pause_ms_per_byte, fixed_ms, pause_budget_ms, step_budget_s, forced) for c in bins]
