"""Per-bin timer index and the per-epoch clock (processing time, watermark) of processor jobs.

**Timer index.** A key with a due timer must be visited even when it gets no input, so every
timer also has an index entry inside its key's bin range:

    bin_start (8 bytes) + 0x02 + kind (1 byte) + expiry (8 bytes, offset binary) + key's store key

`bin_start` is the first hash of the bin, so the entry sorts inside `[bin_start, next bin)`: it is
exported, dropped, loaded, snapshotted and written to the changelog with the bin like any state
entry, and one cursor seek per bin finds its due timers in expiry order. A split (k raised) leaves
a bin's entries under its first part's start; the split's epoch files them under their own part
(`rehome`), recorded in the changelog like any change. A merge (k lowered) leaves them under each
part's start; the merge's epoch files them under the merged bin's (`rehome_merged`). Tag 0x02 never collides
with a key's store key (tags 0x00 / 0x01, spark_jobs.bins). Kinds: `t` user timers (processing or
event time, by the query's time mode), `x` TTL expiries (processing time), so a key whose state
expired is cleaned up without input; `h` and `o`, a session handover's per-key tracker and open
keys (spark_jobs.handover_sessions), live in the same index so they move with the bin.

**Clock.** An epoch's processing time and watermark are fixed once, before its tasks run, in
`<checkpoint>/ballast/clock/<epoch>.json`, and reused when the epoch is replayed: timers fire on
the same values whatever attempt runs. The watermark of epoch e is
`max(0, max event time of all epochs before e - lateness)`; the running maximum is kept in each
manifest (`DurableState.commit_epoch`), so it survives restarts.
"""

from __future__ import annotations

import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from spark_jobs.storage import Location

INDEX_TAG = b"\x02"
USER, TTL = b"t", b"x"
TRACK, OPEN = b"h", b"o"  # a session handover's entries (spark_jobs.handover_sessions)
KINDS = (USER, TTL, TRACK, OPEN)  # every kind a split or merge re-files
_TS = struct.Struct(">Q")
_OFF = 1 << 63


def bin_prefix(sk: bytes, k: int) -> bytes:
    """The first 8 bytes of the bin holding store key `sk`."""
    h = struct.unpack(">Q", sk[:8])[0]
    start = (h >> (64 - k)) << (64 - k) if k else 0
    return struct.pack(">Q", start)


def index_key(sk: bytes, k: int, kind: bytes, ts: int) -> bytes:
    return bin_prefix(sk, k) + INDEX_TAG + kind + _TS.pack(ts + _OFF) + sk


def filed_key(b: int, k: int, kind: bytes, ts: int, sk: bytes) -> bytes:
    """The index key of an entry as `scan` found it under bin b (its raw key, to delete it)."""
    return struct.pack(">Q", (b << (64 - k)) if k else 0) + INDEX_TAG + kind + _TS.pack(ts + _OFF) + sk


def is_index_key(sk: bytes) -> bool:
    return sk[8:9] == INDEX_TAG


def parse_index_key(ik: bytes) -> tuple[bytes, int, bytes]:
    """(kind, expiry ms, the key's store key) of an index entry."""
    return ik[9:10], _TS.unpack(ik[10:18])[0] - _OFF, ik[18:]


def scan(txn: Any, db: Any, b: int, k: int, kind: bytes, upto: int | None) -> Iterator[tuple[int, bytes, bytes]]:
    """(expiry, store key, key) of bin b's index entries of `kind` with expiry <= upto (all: None),
    in expiry order."""
    prefix = struct.pack(">Q", (b << (64 - k)) if k else 0) + INDEX_TAG + kind
    cur = txn.cursor(db=db)
    if not cur.set_range(prefix):
        return
    for ik, key in cur:
        if not ik.startswith(prefix):
            return
        _, ts, sk = parse_index_key(ik)
        if upto is not None and ts > upto:
            return
        yield ts, sk, key


def _filed_under(txn: Any, db: Any, prefix: bytes) -> list[tuple[bytes, bytes]]:
    """Every index entry whose key starts with `prefix` (a bin start, the tag and a kind), read
    whole before the caller moves any."""
    cur = txn.cursor(db=db)
    if not cur.set_range(prefix):
        return []
    out = []
    for ik, key in cur:
        if not ik.startswith(prefix):
            break
        out.append((ik, key))
    return out


def rehome(txn: Any, db: Any, bins: Any, k: int, set_entry: Any) -> int:
    """After a split raised k: move every index entry of `bins` filed under a bin start that is not
    its key's bin at `k` (before the split, all of a bin's entries sorted under its first part).
    `set_entry(bin, store key, value or None)` records each delete and put like any state change,
    so the changelog carries them and a part loaded later finds its timers. Returns entries moved.
    Run at the split's own epoch, when every part is still on its parent's worker."""
    moved = 0
    for b in sorted(bins):
        for kind in KINDS:
            prefix = struct.pack(">Q", (b << (64 - k)) if k else 0) + INDEX_TAG + kind
            stray = [(ik, key) for ik, key in _filed_under(txn, db, prefix) if bin_prefix(ik[18:], k) != ik[:8]]
            for ik, key in stray:
                _, ts, sk = parse_index_key(ik)
                home = struct.unpack(">Q", bin_prefix(sk, k))[0] >> (64 - k)
                if home not in bins:
                    raise RuntimeError(f"timer of bin {home} found under bin {b}, which this worker owns but not "
                                       f"{home}: a split must apply in an epoch without moves")
                set_entry(b, ik, None)
                set_entry(home, index_key(sk, k, kind, ts), key)
                moved += 1
    return moved


def rehome_merged(txn: Any, db: Any, bins: Any, k: int, from_k: int, set_entry: Any) -> int:
    """After a merge lowered k from `from_k`: move every index entry filed under a part's start
    (other than the first part's, which is the merged bin's) to the merged bin's start, recorded
    through `set_entry` as `rehome` does. Run at the merge's own epoch, when the parts share a worker."""
    moved, d = 0, from_k - k
    for b in sorted(bins):
        for part in range((b << d) + 1, (b + 1) << d):
            for kind in KINDS:
                prefix = struct.pack(">Q", part << (64 - from_k)) + INDEX_TAG + kind
                for ik, key in _filed_under(txn, db, prefix):
                    _, ts, sk = parse_index_key(ik)
                    set_entry(b, ik, None)
                    set_entry(b, index_key(sk, k, kind, ts), key)
                    moved += 1
    return moved


def first_due(txn: Any, db: Any, bins: Any, k: int, kind: bytes) -> int | None:
    """The earliest expiry of `kind` over `bins` (None: no such timer)."""
    best: int | None = None
    for b in bins:
        for ts, _, _ in scan(txn, db, b, k, kind, None):
            best = ts if best is None else min(best, ts)
            break
    return best


# ------------------------------------------------------------------------------ clock --------
@dataclass(frozen=True)
class EpochClock:
    """The time an epoch runs at: the same on every replay."""

    epoch: int
    processing_ms: int
    watermark_ms: int

    def due(self, time_mode: str) -> int | None:
        """Timers with expiry <= this fire in the epoch."""
        if time_mode == "EventTime":
            return self.watermark_ms
        if time_mode == "ProcessingTime":
            return self.processing_ms
        return None


class ClockLog:
    """`<checkpoint>/ballast/clock/<epoch>.json`, written once per epoch before its tasks."""

    def __init__(self, ballast_dir: Location) -> None:
        self.dir = ballast_dir / "clock"
        self.dir.makedirs()

    def _loc(self, epoch: int) -> Location:
        return self.dir / f"{epoch:012d}.json"

    def for_epoch(self, epoch: int, event_max_before: int | None, lateness_ms: int) -> EpochClock:
        """The logged clock of `epoch`, or a new one (now, watermark from the event-time maximum
        of the epochs before it) logged before it is used."""
        doc = self._loc(epoch).read_json()
        if doc is None:
            wm = max(0, event_max_before - lateness_ms) if event_max_before is not None else 0
            doc = {"epoch": epoch, "processing_ms": int(time.time() * 1000), "watermark_ms": wm}
            self._loc(epoch).write_json(doc)
        return EpochClock(int(doc["epoch"]), int(doc["processing_ms"]), int(doc["watermark_ms"]))

    def watermark_of(self, epoch: int) -> int | None:
        """The watermark `epoch` ran at, if it was logged (a handover completes by it)."""
        doc = self._loc(epoch).read_json() if epoch >= 0 else None
        return int(doc["watermark_ms"]) if doc is not None else None

    def gc(self, keep_after: int) -> None:
        for n in self.dir.list():
            m = re.fullmatch(r"(\d+)\.json", n)
            if m and int(m.group(1)) < keep_after:
                (self.dir / n).delete()


class TimerSchedule:
    """The driver's view of the earliest pending timer and TTL expiry over all workers, from the
    tasks' reports; decides when an epoch without input must still run tasks, and when the
    job should tick itself to get such an epoch. Unknown (after a start) counts as due once."""

    def __init__(self, time_mode: str, lateness_ms: int) -> None:
        self.time_mode, self.lateness_ms = time_mode, lateness_ms
        self.known = False
        self.next_timer: int | None = None
        self.next_expiry: int | None = None

    def update(self, docs: list[dict[str, Any]]) -> None:
        self.known = True
        self.next_timer = min((int(d["next_timer_ms"]) for d in docs if d.get("next_timer_ms") is not None),
                              default=None)
        self.next_expiry = min((int(d["next_expiry_ms"]) for d in docs if d.get("next_expiry_ms") is not None),
                               default=None)

    def _due(self, timer_upto: int | None, now_ms: int) -> bool:
        if not self.known:
            return True
        return ((self.next_timer is not None and timer_upto is not None and self.next_timer <= timer_upto)
                or (self.next_expiry is not None and self.next_expiry <= now_ms))

    def epoch_needs_tasks(self, clock: EpochClock) -> bool:
        return self._due(clock.due(self.time_mode), clock.processing_ms)

    def tick_due(self, now_ms: int, event_max: int | None) -> bool:
        """Would an epoch started now fire something? (the next epoch's watermark comes from the
        event-time maximum committed so far)."""
        wm = max(0, event_max - self.lateness_ms) if event_max is not None else 0
        upto = wm if self.time_mode == "EventTime" else now_ms if self.time_mode == "ProcessingTime" else None
        return self._due(upto, now_ms)
