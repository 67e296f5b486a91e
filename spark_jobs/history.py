"""The committed epochs as a task reads them: each manifest's objects and map, the snapshots, and
the bins a handover restarted (spark_jobs.durable writes them; `BinSource` reads bins through them).

A completed handover leaves a bin whose history restarts: empty before the step's first epoch
(`since`), then in the new owner's objects through the completion epoch, then in its owners' as
usual. The completion's manifest records that (`handed_over`), so no snapshot is needed at the
completion for a later reader to rebuild the bin without the old owner's state: the entry costs a
few bytes where a snapshot would write every worker's state in the completion's epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark_jobs.objects import epoch_name
from spark_jobs.storage import Location


@dataclass(frozen=True)
class ManifestEntry:
    """One committed epoch, as tasks need it: who owned what, and which objects hold the changes."""

    epoch: int
    map_version: int
    changelog: dict[int, str]  # worker -> object name
    snapshot: dict[int, str]  # worker -> object name (empty unless the epoch took a snapshot)
    event_max_ms: int | None = None  # processors: largest event time of this and every earlier epoch
    # bins whose handover completed at this epoch (at this epoch's k) -> (since, the new owner)
    handed_over: dict[int, tuple[int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"epoch": self.epoch, "map_version": self.map_version,
                             "changelog": {str(w): n for w, n in self.changelog.items()},
                             "snapshot": {str(w): n for w, n in self.snapshot.items()}}
        if self.event_max_ms is not None:
            d["event_max_ms"] = self.event_max_ms
        if self.handed_over:
            d["handed_over"] = {str(b): list(v) for b, v in self.handed_over.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ManifestEntry:
        return cls(int(d["epoch"]), int(d["map_version"]), {int(w): n for w, n in d["changelog"].items()},
                   {int(w): n for w, n in d.get("snapshot", {}).items()}, d.get("event_max_ms"),
                   {int(b): (int(v[0]), int(v[1])) for b, v in d.get("handed_over", {}).items()})


@dataclass(frozen=True)
class FreshSince:
    """A bin whose history restarts at a handover: empty before `since`, in `worker`'s objects from
    `since` through `done` (the completion's epoch; None while the handover is open: a new owner's
    task rebuilding its fresh bin), in the map's owners after `done`."""

    since: int
    worker: int
    done: int | None = None

    def reads(self, epoch: int) -> bool:
        """Whether `epoch`'s changes of the bin are in `worker`'s objects."""
        return self.since <= epoch and (self.done is None or epoch <= self.done)


@dataclass(frozen=True)
class History:
    """The manifests a task may need (retained ones before its epoch) and the maps they name."""

    root: str  # state URI
    entries: tuple[ManifestEntry, ...]
    maps: dict[int, tuple[int, ...]]
    complete_after: int = -1  # every manifest of an epoch after this one is retained

    def bits(self, entry: ManifestEntry) -> int:
        """k of the epoch's map: its objects index bins at that k (a split step raises it)."""
        return len(self.maps[entry.map_version]).bit_length() - 1

    def owner(self, entry: ManifestEntry, b: int, k: int | None = None) -> int:
        """Worker that owned bin `b` (a bin at `k` bits; None: the entry's own k) at that epoch."""
        m = self.maps[entry.map_version]
        return m[b if k is None else b >> (k - self.bits(entry))]

    def snapshot_base(self, upto: int) -> ManifestEntry | None:
        """The newest manifest <= upto that took a snapshot."""
        for e in reversed(self.entries):
            if e.epoch <= upto and e.snapshot:
                return e
        return None

    def fresh_since(self, b: int, k: int | None, upto: int) -> FreshSince | None:
        """The newest completed handover by `upto` of bin `b` (at `k` bits; None: the entries' own k),
        or of the bin it was split from. A bin merged since is asked for part by part (`BinSource`)."""
        for e in reversed(self.entries):
            if e.epoch > upto or not e.handed_over:
                continue
            d = 0 if k is None else k - self.bits(e)
            got = e.handed_over.get(b >> d) if d >= 0 else None
            if got is not None:
                return FreshSince(got[0], got[1], e.epoch)
        return None

    def object(self, kind: str, entry: ManifestEntry, worker: int) -> Location:
        names = entry.changelog if kind == "changelog" else entry.snapshot
        return Location.of(self.root) / kind / epoch_name(entry.epoch) / names[worker]
