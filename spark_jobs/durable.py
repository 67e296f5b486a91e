"""Durable state: the truth about every bin, under the job's state URI (any `pyarrow.fs` location).

Layout (`<state>` = `--state-uri`, default `<checkpoint-dir>/state`):

    <state>/store.json                         job, bins, store id (a cache belongs to one store)
    <state>/maps/<version>.json                 bin -> worker map of each map version
    <state>/changelog/<epoch>/w<NNNN>-<attempt>.arrow   one task attempt's changes + outputs
    <state>/snapshot/<epoch>/w<NNNN>-<attempt>.arrow    one worker's whole state after the epoch
    <state>/manifest/<epoch>.json               the driver's commit record of the epoch

An *object* (changelog or snapshot) is an Arrow IPC file written once by one task attempt: one
record batch per bin (a bin is read alone with one ranged read of its batch), then one batch of
the epoch's outputs and dead letters. Its schema metadata carries the bin index and the task's
metrics, so the driver learns a worker's metrics without opening any store.

Commit order of epoch e: every task writes its changelog object (durable) *before* it commits
its local cache; after Spark's job for e succeeded, the driver picks one object per worker (the
first by name: attempts of one epoch are identical, see docs/dataplane.md), writes the manifest,
and only then returns from foreachBatch so Spark commits the epoch. A bin's state after epoch e is
therefore: the newest snapshot of its owner at S <= e, then the changelog batches of the bin from
the owners at each manifest epoch in (S, e] — or, for a bin a handover restarted after S, from its
new owner since the step (spark_jobs.history).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ballast.errors import BallastError
from spark_jobs.history import FreshSince, History, ManifestEntry
from spark_jobs.objects import (
    FORMAT,
    ObjectReader,
    epoch_name,
    read_meta,
)
from spark_jobs.storage import Location

log = logging.getLogger("ballast.durable")

_OBJ = re.compile(r"w(\d{4})-(.+)\.arrow")


class StoreMismatch(BallastError, RuntimeError):
    """The state URI holds another job's state (or another bin count)."""


class StateGap(BallastError, RuntimeError):
    """The durable state cannot serve the epoch asked for (retention or a rolled-back checkpoint)."""


class BinSource:
    """Reads bins out of the durable state for one task, keeping each object open once.

    Bins are asked for at the task's `k`. An object of an epoch before a split indexes the bin's
    parent (`b >> d`, d = k - the epoch's k); the rows of bin b are the parent's rows whose store
    key lies in b's range — a bin is a key range at any k (spark_jobs.bins), so nothing is rewritten.
    An object of an epoch before a merge indexes the bin's parts, each in the object of its owner
    then: their rows, in order, are bin b's."""

    def __init__(self, history: History, k: int | None = None, fresh: dict[int, tuple[int, int]] | None = None) -> None:
        self.h = history
        self.k = k
        self._open: dict[str, ObjectReader] = {}
        # a handover's fresh bins at their new owner (spark_jobs.handover.overrides): bin -> (since,
        # worker); such a bin is empty before `since` and in that worker's objects from then on
        self.fresh = fresh or {}

    def _reader(self, loc: Location) -> ObjectReader:
        r = self._open.get(loc.uri)
        if r is None:
            r = self._open[loc.uri] = ObjectReader(loc)
        return r

    def close(self) -> None:
        for r in self._open.values():
            r.close()
        self._open.clear()

    def lineage(self, b: int, upto: int) -> FreshSince | None:
        """Where bin b's history restarts, if a handover restarted it (the task's open one first)."""
        if b in self.fresh:
            since, w = self.fresh[b]
            return FreshSince(since, w)
        return self.h.fresh_since(b, self.k, upto)

    def _bin_changes(self, kind: str, e: ManifestEntry, b: int, fs: FreshSince | None, upto: int
                     ) -> tuple[list[bytes], list[bytes | None]] | None:
        names = e.changelog if kind == "changelog" else e.snapshot
        if fs is not None and e.epoch < fs.since:
            return None  # the bin restarted empty at its handover's first epoch
        k_e = self.h.bits(e)
        d = 0 if self.k is None else self.k - k_e
        if d < 0:  # an epoch before a merge: bin b was parts b·2^-d .. , each in its owner's object then
            parts = [ch for c in range(b << -d, (b + 1) << -d)
                     if (ch := self._part_changes(kind, e, names, c, upto)) is not None]
            if not parts:
                return None
            return [x for ks, _ in parts for x in ks], [x for _, vs in parts for x in vs]
        w = fs.worker if fs is not None and fs.reads(e.epoch) else self.h.owner(e, b, self.k)
        if w not in names:
            return None
        keys, values = self._reader(self.h.object(kind, e, w)).bin_changes(b >> d)
        if d == 0 or not keys:
            return keys, values
        from spark_jobs.bins import bin_range

        lo, hi = bin_range(b, self.k)  # type: ignore[arg-type]
        pick = [i for i, sk in enumerate(keys) if sk >= lo and (hi is None or sk < hi)]
        return [keys[i] for i in pick], [values[i] for i in pick]

    def _part_changes(self, kind: str, e: ManifestEntry, names: dict[int, str], c: int, upto: int
                      ) -> tuple[list[bytes], list[bytes | None]] | None:
        """Bin c at the epoch's own k, from its owner's object (parts in ascending order keep a
        merged bin's keys sorted: a bin is a key range), or from its handover's new owner's."""
        fs = self.h.fresh_since(c, self.h.bits(e), upto)
        if fs is not None and e.epoch < fs.since:
            return None
        w = fs.worker if fs is not None and fs.reads(e.epoch) else self.h.owner(e, c)
        return self._reader(self.h.object(kind, e, w)).bin_changes(c) if w in names else None

    def changes_since(self, b: int, after: int, upto: int) -> Iterator[tuple[list[bytes], list[bytes | None]]]:
        """Bin b's changelog batches of the manifests in (after, upto], oldest first."""
        fs = self.lineage(b, upto)
        for e in self.h.entries:
            if after < e.epoch <= upto:
                ch = self._bin_changes("changelog", e, b, fs, upto)
                if ch is not None:
                    yield ch

    def full(self, b: int, upto: int) -> tuple[int, Iterator[tuple[list[bytes], list[bytes | None]]]]:
        """(base epoch, batches) that rebuild bin b as of `upto`: snapshot, then changelogs."""
        base = self.h.snapshot_base(upto)
        fs = self.lineage(b, upto)
        if fs is not None and base is not None and base.epoch < fs.since:
            base = None  # a handed-over bin starts empty at its handover's first epoch

        def gen() -> Iterator[tuple[list[bytes], list[bytes | None]]]:
            after = -1
            if base is not None:
                ch = self._bin_changes("snapshot", base, b, fs, upto)
                if ch is not None:
                    yield ch
                after = base.epoch
            yield from self.changes_since(b, after, upto)

        return (base.epoch if base else -1), gen()

    def can_catch_up(self, since: int) -> bool:
        """True when every manifest after `since` is still retained (no snapshot needed)."""
        return since >= self.h.complete_after


# ----------------------------------------------------------------------------- the driver side -
class DurableState:
    """The driver's view: create/verify the store, commit epochs, keep the history, retention."""

    def __init__(self, uri: str, job: str, bins: int, snapshot_every: int = 10) -> None:
        self.loc = Location.of(uri)
        self.uri = self.loc.uri
        self.job = job
        self.bins = bins
        self.snapshot_every = max(1, snapshot_every)
        self.store_id = self._ensure_store()
        self._retained = self._retained_from()
        self.entries: list[ManifestEntry] = []
        self.maps: dict[int, tuple[int, ...]] = {}
        self._load()

    def _ensure_store(self) -> str:
        doc = (self.loc / "store.json").read_json()
        if doc is None:
            doc = {"format": FORMAT, "job": self.job, "bins": self.bins, "store_id": uuid.uuid4().hex}
            (self.loc / "store.json").write_json(doc)
            return str(doc["store_id"])
        if doc.get("job") != self.job or int(doc.get("bins", -1)) != self.bins:
            raise StoreMismatch(
                f"state at {self.uri} belongs to job {doc.get('job')!r} with {doc.get('bins')} bins, not job "
                f"{self.job!r} with {self.bins}: point --state-uri at this job's own state (or a new, empty "
                "location for a new job)")
        return str(doc["store_id"])

    def _load(self) -> None:
        for name in (self.loc / "manifest").list():
            if name.endswith(".json"):
                d = (self.loc / "manifest" / name).read_json()
                if d is not None:
                    self.entries.append(ManifestEntry.from_dict(d))
        self.entries.sort(key=lambda e: e.epoch)
        for v in {e.map_version for e in self.entries}:
            self._map(v)

    def _map(self, version: int) -> tuple[int, ...]:
        m = self.maps.get(version)
        if m is None:
            doc = (self.loc / "maps" / f"{version}.json").read_json()
            if doc is None:
                raise StateGap(f"map v{version} is missing under {self.uri}/maps: the durable state is damaged")
            m = self.maps[version] = tuple(int(w) for w in doc["assignment"])
        return m

    def record_map(self, version: int, assignment: Iterable[int]) -> None:
        """Write map `version` once (a replay rewrites the same content)."""
        a = tuple(int(w) for w in assignment)
        if self.maps.get(version) == a:
            return
        loc = self.loc / "maps" / f"{version}.json"
        old = loc.read_json()
        if old is not None and tuple(old["assignment"]) != a:
            raise StateGap(f"map v{version} under {self.uri} differs from the journal's: the durable state belongs "
                           "to another run of this job")
        if old is None:
            loc.write_json({"version": version, "assignment": list(a)})
        self.maps[version] = a

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else -1

    def check_against(self, last_committed: int) -> None:
        """Refuse to run when Spark's checkpoint and the durable state disagree (a rolled-back
        checkpoint, or state deleted by retention that a replay would need)."""
        ahead = [e.epoch for e in self.entries if e.epoch > last_committed + 1]
        if ahead:
            raise StateGap(
                f"durable state at {self.uri} has epochs {ahead[:5]} beyond Spark's last committed epoch "
                f"{last_committed}: the Spark checkpoint was rolled back or replaced. Restore the matching "
                "checkpoint, or start the job with a new checkpoint dir and state URI.")
        if self._retained > last_committed + 1:
            raise StateGap(
                f"Spark's checkpoint is at epoch {last_committed}, but the durable state at {self.uri} kept "
                f"only epochs from {self._retained} on (retention): replaying from there would lose state "
                "and outputs. Restore the matching checkpoint, or start with a new checkpoint dir and state URI.")

    def _retained_from(self) -> int:
        return int(((self.loc / "store.json").read_json() or {}).get("retained_from", 0))

    def history(self, before: int | None = None) -> History:
        es = tuple(e for e in self.entries if before is None or e.epoch < before)
        return History(self.uri, es, {v: self.maps[v] for v in {e.map_version for e in es}},
                       self._retained - 1 if self._retained > 0 else -1)

    def snapshot_due(self, epoch: int) -> bool:
        """A snapshot every `snapshot_every` committed epochs with changes since the last one."""
        base = self.history(epoch).snapshot_base(epoch)
        since = [e for e in self.entries if e.epoch < epoch and (base is None or e.epoch > base.epoch)]
        return len(since) >= self.snapshot_every

    def commit_epoch(self, epoch: int, map_version: int, workers: int, snapshot: bool,
                     handed_over: dict[int, tuple[int, int]] | None = None) -> list[dict[str, Any]]:
        """Pick one object per worker, write the manifest; returns each worker's task metrics.
        `handed_over`: the bins whose handover completes in this epoch -> (since, the new owner)."""
        names: dict[int, str] = {}
        snaps: dict[int, str] = {}
        docs: list[dict[str, Any]] = []
        for kind, chosen in (("changelog", names), ("snapshot", snaps)):
            if kind == "snapshot" and not snapshot:
                continue
            for n in (self.loc / kind / epoch_name(epoch)).list():
                m = _OBJ.fullmatch(n)
                if m and int(m.group(1)) < workers and int(m.group(1)) not in chosen:
                    chosen[int(m.group(1))] = n
        missing = [w for w in range(workers) if w not in names]
        if missing:
            raise StateGap(f"epoch {epoch}: no changelog object from worker(s) {missing} under {self.uri}; the "
                           "Spark job succeeded, so the state URI is not shared by the executors (use a "
                           "location every executor and the driver reach)")
        if snapshot and len(snaps) < workers:
            log.warning("epoch %d: snapshot objects from %d of %d workers; no snapshot recorded", epoch, len(snaps),
                        workers)
            snaps = {}
        for w in range(workers):
            meta = read_meta(self.loc / "changelog" / epoch_name(epoch) / names[w])
            docs.append(meta.get("metrics", {}))
        seen = [int(d["max_event_ms"]) for d in docs if d.get("max_event_ms") is not None]
        before = self.event_max_before(epoch)
        ev = max(seen + ([before] if before is not None else []), default=None)
        entry = ManifestEntry(epoch, map_version, names, snaps, ev, dict(handed_over or {}))
        (self.loc / "manifest" / f"{epoch_name(epoch)}.json").write_json(entry.to_dict())
        self.entries = [e for e in self.entries if e.epoch != epoch] + [entry]
        self.entries.sort(key=lambda e: e.epoch)
        return docs

    def event_max_before(self, epoch: int) -> int | None:
        """The largest event time of the committed epochs before `epoch` (the watermark's base)."""
        prior = [e for e in self.entries if e.epoch < epoch]
        return prior[-1].event_max_ms if prior else None

    def retain(self, before_delete: Callable[[], None] | None = None) -> int:
        """Delete epochs older than the second-newest snapshot: no replay or rebuild reads them.
        `before_delete` runs first when there is something to delete (the driver's token check).
        Returns how many epochs were deleted."""
        snaps = [e.epoch for e in self.entries if e.snapshot]
        if len(snaps) < 2:
            return 0
        keep_from = snaps[-2]
        old = [e for e in self.entries if e.epoch < keep_from]
        if old and before_delete is not None:
            before_delete()
        doc = (self.loc / "store.json").read_json() or {}
        if int(doc.get("retained_from", 0)) < keep_from:
            doc["retained_from"] = keep_from
            (self.loc / "store.json").write_json(doc)
        self._retained = keep_from
        for e in old:
            (self.loc / "manifest" / f"{epoch_name(e.epoch)}.json").delete()
            for kind in ("changelog", "snapshot"):
                (self.loc / kind / epoch_name(e.epoch)).delete_dir()
        self.entries = [e for e in self.entries if e.epoch >= keep_from]
        used = {e.map_version for e in self.entries}
        self.maps = {v: a for v, a in self.maps.items() if v in used or v >= max(used, default=0)}
        return len(old)


def find_object(root: str, kind: str, epoch: int, worker: int) -> Location | None:
    """An object some attempt already wrote for (epoch, worker), if any (first by name)."""
    d = Location.of(root) / kind / epoch_name(epoch)
    prefix = f"w{worker:04d}-"
    for n in d.list():
        if n.startswith(prefix) and n.endswith(".arrow"):
            return d / n
    return None


def read_state(root: str) -> dict[int, dict[bytes, bytes]]:
    """bin -> {store key: value} after the newest committed epoch, bins at that epoch's count
    (tests, offline inspection)."""
    loc = Location.of(root)
    doc = (loc / "store.json").read_json()
    if doc is None:
        return {}
    ds = DurableState(root, doc["job"], int(doc["bins"]))
    h = ds.history()
    bins = len(h.maps[h.entries[-1].map_version]) if h.entries else ds.bins  # a split raised it
    src = BinSource(h, bins.bit_length() - 1)
    out: dict[int, dict[bytes, bytes]] = {}
    try:
        for b in range(bins):
            kv: dict[bytes, bytes] = {}
            _, batches = src.full(b, ds.last_epoch)
            for keys, values in batches:
                for k, v in zip(keys, values):
                    if v is None:
                        kv.pop(k, None)
                    else:
                        kv[k] = v
            if kv:
                out[b] = kv
    finally:
        src.close()
    return out
