"""Move bins between worker stores at an epoch boundary (Megaphone's migration, on local disk).

Runs in the driver after epoch e-1 committed everywhere and before any record of epoch e is
routed, so the old owner has applied every earlier record and the new owner none of epoch e.
Each bin moves in two transactions, each with a marker keyed by (epoch, bin):
  1. import into the new owner (clear its range, put the exported keys, bump counters, marker "in");
  2. delete from the old owner (delete the range, drop counters, marker "out" with the stats).
A crash between them is repaired by re-running: the export reads the old owner (still intact),
the import sees its marker and skips, the delete runs. A bin whose "out" marker exists is done.
Everything the operator keeps for a key (timers, pending records in the state) lives under the
key's bin prefix and so moves with it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from spark_jobs import faults
from spark_jobs.state import WorkerStore

log = logging.getLogger("ballast.migrate")


@dataclass
class MoveStats:
    bins: int = 0
    keys: int = 0
    bytes: int = 0
    ms: float = 0.0
    per_bin: list[dict[str, float]] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return {"bins": self.bins, "keys": self.keys, "bytes": self.bytes, "ms": self.ms, "per_bin": self.per_bin}


def move_bins(state_dir: str | Path, epoch: int, moves: list[tuple[int, int, int]], k: int) -> MoveStats:
    """Move each (bin, src, dst); idempotent under crashes at any point (see module doc)."""
    stats = MoveStats()
    t0 = time.perf_counter()
    stores: dict[int, WorkerStore] = {}

    def store(w: int) -> WorkerStore:
        if w not in stores:
            stores[w] = WorkerStore(state_dir, w)
        return stores[w]

    try:
        for b, src, dst in sorted(moves):
            s, d = store(src), store(dst)
            with s.env.begin() as rtxn:
                done = s.marker(rtxn, epoch, b, "out")
            if done is not None:  # finished before a crash: take its stats from the marker
                stats.bins += 1
                stats.keys += int(done["keys"])
                stats.bytes += int(done["bytes"])
                stats.per_bin.append({"bin": b, **done})
                continue
            tb = time.perf_counter()
            with s.env.begin() as rtxn:
                items = s.export_bin(rtxn, b, k)
                ckeys, cbytes = s.bin_counter(rtxn, b)
            nbytes = sum(len(key) + len(v) for key, v in items)
            if (ckeys, cbytes) != (len(items), nbytes):
                log.warning("bin %d on worker %d: counters say %d keys/%d bytes, store has %d/%d",
                            b, src, ckeys, cbytes, len(items), nbytes)
            with d.env.begin(write=True) as txn:
                if d.marker(txn, epoch, b, "in") is None:
                    stale = d.delete_bin(txn, b, k)
                    if stale:
                        log.warning("bin %d: dropped %d stale keys on new owner %d", b, stale, dst)
                    dk, db = d.bin_counter(txn, b)
                    d.add_bin_counter(txn, b, len(items) - dk, nbytes - db)
                    d.import_bin(txn, items)
                    d.set_marker(txn, epoch, b, "in", {"keys": len(items), "bytes": nbytes})
            faults.hit("mid_move")
            ms = (time.perf_counter() - tb) * 1000
            info = {"keys": len(items), "bytes": nbytes, "ms": ms, "from": src, "to": dst}
            with s.env.begin(write=True) as txn:
                s.delete_bin(txn, b, k)
                sk, sb = s.bin_counter(txn, b)
                s.add_bin_counter(txn, b, -sk, -sb)
                s.set_marker(txn, epoch, b, "out", info)
            stats.bins += 1
            stats.keys += len(items)
            stats.bytes += nbytes
            stats.per_bin.append({"bin": b, **info})
    finally:
        for st in stores.values():
            st.close()
    stats.ms = (time.perf_counter() - t0) * 1000
    return stats
