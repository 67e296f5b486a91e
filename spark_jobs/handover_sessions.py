"""Session windows in a handover (docs/handover.md, "Session windows: the rule"): which owner keeps
which session's outputs, and when the old owner holds no session open any more.

The rule is the core's (`ballast.policy.handover.Handover.session_owner`): a session belongs to the
owner of the moment it started. The step's first event F is one past the largest event time the job
read before it; activation = boundary = F + gap. From the step's epoch on both owners get the bin's
rows: the old owner folds every row, the new owner the rows >= F into its fresh bin; a row below the
epoch's watermark is late for both. Per key k, both compute the same **crossing** from the rows >= F
they fold:

    crossing_k = the first row time t >= F + gap of k with no row of k in (t - gap, t)

a session start (a row joins a session when it lies less than a gap from one of its rows, as in the
core's `_sessions`) that the new owner can tell as one: (t - gap, t) lies after F, where it sees
every row. A later non-late row in (t - gap, t) invalidates a candidate (the next one is later), an
earlier session start >= F + gap replaces it; a candidate is final once the watermark reaches it,
since every later row is at or past the watermark.

**Outputs** (UniMiCo's duplicate suppression, per key): the old owner keeps the outputs of k's timers
at ts <= crossing_k (all of them while k has none), the new owner those at ts > crossing_k (none while
k has none); a timer outside an owner's range still fires (its handler clears state). With a
session's results emitted by its timer at its last row + gap (the processor's contract), that is a
run without a migration:
- the old owner folds every row, so its sessions are the reference's. One that starts before
  crossing_k has no row in (crossing_k - gap, crossing_k) and none at or after crossing_k (that starts
  a session), so its last row is <= crossing_k - gap and its timer <= crossing_k: the old owner's;
- the new owner's sessions that start before crossing_k are partial (rows >= F only) and end by then
  too: dropped;
- a session that starts at crossing_k or later has all its rows after F: the new owner's is whole
  and the reference's; its timer is >= its start + gap > crossing_k: the new owner's;
- a timer fires at ts <= the watermark, and a candidate not yet final is past the watermark: until k's
  crossing is final, every timer of k is the old owner's, whatever the crossing turns out to be.

**Completion** (the new owner's index, kind `o` of spark_jobs.timers): each key with a row >= F that
is not resolved yet has one entry at its *need* time: crossing_k, or last_k + gap while it has none
(last_k: its largest row >= F); the entry moves when that changes. After its timers, each epoch
deletes the entries <= its watermark: those keys are resolved for good (a crossing is final; a key
quiet since last_k + gap gets no later row before last_k + gap >= F + gap, so its next session is the
new owner's). The task reports each bin's entries left (`handover_open`) and the earliest one in
`next_timer_ms`, so an epoch runs tasks, and the job ticks itself, when one comes due, as for a timer.
The old owner's sessions have all closed, their timers fired, once the watermark passed F + gap (a
key with no row since F) and no entry is left: spark_jobs.control_handover applies the step then. A
key that never goes quiet (no gap between its rows from F on) keeps the handover open: it makes no
crossing, and its last row + gap stays ahead of the watermark.

Each key's tracker (kind `h`, filed under the step's F) and its index entry are durable key state in
each owner's cache, written like every change (the changelog, a replay, a rebuild of a lost cache see
them). A bin with no open handover here — superseded, completed, or starting now — has them purged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ballast.policy.handover import WindowSpec
from spark_jobs import timers
from spark_jobs.handover import BinHandover, Role


@dataclass
class Tracker:
    """One key's rows >= F as a session handover needs them: the crossing so far, the largest row,
    the chains of rows (start, end) that a later row can still join, and whether it is resolved."""

    crossing: int | None = None
    last: int | None = None
    chains: list[tuple[int, int]] = field(default_factory=list)
    done: bool = False  # resolved: no completion entry any more

    def fold(self, times: Iterable[int], first: int, gap: int, watermark: int) -> None:
        """Rows at `times` (at or past `watermark`, the epoch's) into the chains; the crossing again
        unless it is final. A chain that ends a gap or more before the watermark can take no row, and
        one that starts at or past F + gap there is final (<= watermark): it is dropped."""
        for t in sorted(x for x in times if x >= first):
            lo = hi = t
            keep = []
            for s, e in self.chains:
                if s - gap < t < e + gap:  # less than a gap from a row of the chain: joins it
                    lo, hi = min(lo, s), max(hi, e)
                else:
                    keep.append((s, e))
            self.chains = sorted([*keep, (lo, hi)])
            self.last = t if self.last is None else max(self.last, t)
        if self.crossing is None or self.crossing > watermark:
            self.crossing = min((s for s, _ in self.chains if s >= first + gap), default=None)
        self.prune(gap, watermark)

    def prune(self, gap: int, watermark: int) -> None:
        self.chains = [(s, e) for s, e in self.chains if e + gap > watermark]

    def need(self, gap: int) -> int | None:
        """When the key stops holding the handover open (None: resolved, or no row yet)."""
        if self.done or self.last is None:
            return None
        return self.crossing if self.crossing is not None else self.last + gap

    def to_bytes(self) -> bytes:
        return json.dumps([self.crossing, self.last, int(self.done), self.chains], separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes | None) -> Tracker:
        if raw is None:
            return cls()
        c, last, done, chains = json.loads(raw)
        return cls(c, last, [(int(s), int(e)) for s, e in chains], bool(done))


def keeps(role: Role, crossing: int | None, timer_ms: int) -> bool:
    """Whether an owner keeps the outputs of a key's timer (module docstring)."""
    if role == "old":
        return crossing is None or timer_ms <= crossing
    return crossing is not None and timer_ms > crossing


class TaskHandovers:
    """One task's bins in a handover, for spark_jobs.processing.run_processor: the keys' trackers
    (`rows`), whose timer outputs this owner keeps (`keeps`), and the completion index (`finish`).
    `set_entry(bin, store key, value or None)` writes like every change of the epoch."""

    def __init__(self, roles: dict[int, tuple[Role, BinHandover]], txn: Any, db: Any, k: int, epoch: int,
                 watermark: int, set_entry: Callable[[int, bytes, bytes | None], None], held: Iterable[int],
                 window: WindowSpec | None) -> None:
        self.roles, self.txn, self.db, self.k, self.wm, self.set = roles, txn, db, k, watermark, set_entry
        self.window = window  # the operator's declared windows: staggered ones hand over per key
        self._key_bounds: dict[tuple[int, bytes], tuple[int, int]] = {}  # a key's rows and its timers ask alike
        if window is not None and window.kind == "session":  # stale trackers: superseded, completed, starting now
            for b in sorted(held):
                r = roles.get(b)
                if r is None or r[1].since == epoch:
                    self._purge(b)

    def _purge(self, b: int) -> None:
        """Delete bin b's trackers and index entries: one cursor seek when there are none (kinds `h`
        and `o` sort next to each other: no kind lies between them)."""
        first = timers.filed_key(b, self.k, timers.TRACK, -(1 << 63), b"")
        cur = self.txn.cursor(db=self.db)
        if not cur.set_range(first) or cur.key()[:9] != first[:9] or cur.key()[9:10] not in (timers.TRACK,
                                                                                           timers.OPEN):
            return
        for kind in (timers.TRACK, timers.OPEN):
            for ts, sk, _ in list(timers.scan(self.txn, self.db, b, self.k, kind, None)):
                self.set(b, timers.filed_key(b, self.k, kind, ts, sk), None)

    def _session(self, b: int) -> tuple[Role, BinHandover, int, int] | None:
        r = self.roles.get(b)
        if r is None or r[1].session_first_ms is None or r[1].gap_ms is None:
            return None
        return r[0], r[1], r[1].session_first_ms, r[1].gap_ms

    def _track_key(self, sk: bytes, first: int) -> bytes:
        return timers.index_key(sk, self.k, timers.TRACK, first)

    def rows(self, b: int, sk: bytes, key: bytes, times: list[int]) -> None:
        """A key's rows of the epoch that this owner folds (after the late ones are dropped)."""
        s = self._session(b)
        if s is None:
            return
        role, _, first, gap = s
        tk = self._track_key(sk, first)
        raw = self.txn.get(tk, db=self.db)
        if raw is None and not any(t >= first for t in times):
            return
        tr = Tracker.from_bytes(raw)
        before = tr.need(gap)
        tr.fold(times, first, gap, self.wm)
        self.set(b, tk, tr.to_bytes())
        after = tr.need(gap)
        if role == "new" and before != after:  # only the new owner keeps the completion index
            if before is not None:
                self.set(b, timers.index_key(sk, self.k, timers.OPEN, before), None)
            if after is not None:
                self.set(b, timers.index_key(sk, self.k, timers.OPEN, after), key)

    def bounds(self, b: int, key: bytes) -> tuple[BinHandover | None, int, int]:
        """Which of a key's rows this owner folds: (the handover, when this is a new owner's fresh
        bin; rows from; rows before). A new owner folds from the key's activation on; an old owner of
        grid windows folds only rows before the key's boundary — its windows end by it, and such a
        handover is not cancelled (spark_jobs.control), so no row after it is ever its; an old owner
        of sessions folds every row (a session handover may be superseded: it then keeps the bin)."""
        r = self.roles.get(b)
        if r is None or (r[0] == "old" and r[1].session_first_ms is not None):
            return None, -(1 << 63), 1 << 63
        lo, hi = self._bounds_of(b, r[1], key)
        return (r[1], lo, 1 << 63) if r[0] == "new" else (None, -(1 << 63), hi)

    def _bounds_of(self, b: int, h: BinHandover, key: bytes) -> tuple[int, int]:
        """`BinHandover.key_bounds` once per key and task (a staggered key's phase parses its key)."""
        got = self._key_bounds.get((b, key))
        if got is None:
            got = self._key_bounds[(b, key)] = h.key_bounds(self.window, key)
        return got

    def keeps(self, b: int, sk: bytes, timer_ms: int, key: bytes) -> bool:
        """Whether this owner keeps the outputs of the key's timer (a bin in no handover: always)."""
        r = self.roles.get(b)
        if r is None:
            return True
        s = self._session(b)
        if s is None:  # grid windows: the key's boundary (its own grid's, when staggered)
            return r[1].keeps_output(r[0], timer_ms, self._bounds_of(b, r[1], key)[1])
        return keeps(s[0], Tracker.from_bytes(self.txn.get(self._track_key(sk, s[2]), db=self.db)).crossing, timer_ms)

    def _new_bins(self) -> list[tuple[int, int, int]]:
        """(bin, F, gap) of the session handovers this task is the new owner in."""
        return [(b, s[2], s[3]) for b in sorted(self.roles) if (s := self._session(b)) is not None and s[0] == "new"]

    def finish(self) -> dict[str, int]:
        """After the epoch's timers: resolve the keys whose need time the watermark reached; returns
        the new owner's open keys per bin (the task metrics' `handover_open`)."""
        out: dict[str, int] = {}
        for b, first, gap in self._new_bins():
            for ts, sk, _ in list(timers.scan(self.txn, self.db, b, self.k, timers.OPEN, self.wm)):
                self.set(b, timers.filed_key(b, self.k, timers.OPEN, ts, sk), None)
                tk = self._track_key(sk, first)
                tr = Tracker.from_bytes(self.txn.get(tk, db=self.db))
                tr.done = True
                tr.prune(gap, self.wm)
                self.set(b, tk, tr.to_bytes())
            out[str(b)] = sum(1 for _ in timers.scan(self.txn, self.db, b, self.k, timers.OPEN, None))
        return out

    def next_due(self, user_timer_ms: int | None) -> int | None:
        """The earliest user timer or completion entry: an epoch must run tasks when either is due."""
        due = timers.first_due(self.txn, self.db, [b for b, _, _ in self._new_bins()], self.k, timers.OPEN)
        return min((t for t in (user_timer_ms, due) if t is not None), default=None)
