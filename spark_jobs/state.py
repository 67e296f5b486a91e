"""Per-worker state stores: one LMDB environment per worker on local disk.

Why LMDB (spark_jobs/bench_stores.py, numbers in docs/dataplane.md): a store is opened by
whichever Python worker process serves the worker's partition this epoch, and by the driver to
move bins — LMDB opens in ~0.3 ms and is safe for several processes; RocksDB reopens in ~9 ms,
locks the directory to one process, and was 2x slower on point get+put and 6x slower moving half
the bins at 1M keys.

Layout (three named sub-databases of one environment, so one write transaction covers them all):
* `data`:   store_key (8-byte BE hash + key) -> operator state bytes. A bin is a key range.
* `meta`:   last_applied epoch; per-bin counters (keys, bytes); worker totals; move markers;
            per-epoch worker metrics (read by the driver after the epoch).
* `outbox`: (epoch, seq) -> output record, re-emitted when an applied epoch is replayed.
Counters are maintained incrementally by every fold and move, so no per-epoch work scans the
store (the only range scans are moves and outbox/metrics garbage collection of old epochs).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lmdb

from spark_jobs.bins import bin_range

MAP_SIZE = int(os.environ.get("BALLAST_LMDB_MAP_SIZE", str(16 << 30)))  # virtual; file grows as used

K_LAST = b"last_applied"
K_TOTAL = b"total"
P_BIN = b"bin/"
P_MARK = b"mark/"
P_METRICS = b"metrics/"
_QQ = struct.Struct(">qq")
_Q = struct.Struct(">q")


def worker_dir(root: str | Path, worker: int) -> Path:
    return Path(root) / f"worker-{worker:04d}"


class WorkerStore:
    """One worker's LMDB environment. Cheap to open; open it per task and close it after."""

    def __init__(self, root: str | Path, worker: int) -> None:
        self.worker = worker
        self.path = worker_dir(root, worker)
        self.path.mkdir(parents=True, exist_ok=True)
        self.env = lmdb.open(str(self.path), map_size=MAP_SIZE, max_dbs=4, readahead=False, max_readers=64)
        self.data = self.env.open_db(b"data")
        self.meta = self.env.open_db(b"meta")
        self.outbox = self.env.open_db(b"outbox")

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> "WorkerStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta --------------------------------------------------------------------------------
    def last_applied(self, txn: lmdb.Transaction) -> int:
        v = txn.get(K_LAST, db=self.meta)
        return _Q.unpack(v)[0] if v else -1

    def set_last_applied(self, txn: lmdb.Transaction, epoch: int) -> None:
        txn.put(K_LAST, _Q.pack(epoch), db=self.meta)

    def bin_counter(self, txn: lmdb.Transaction, b: int) -> tuple[int, int]:
        v = txn.get(P_BIN + struct.pack(">I", b), db=self.meta)
        return _QQ.unpack(v) if v else (0, 0)

    def add_bin_counter(self, txn: lmdb.Transaction, b: int, dkeys: int, dbytes: int) -> tuple[int, int]:
        keys, nbytes = self.bin_counter(txn, b)
        keys, nbytes = keys + dkeys, nbytes + dbytes
        k = P_BIN + struct.pack(">I", b)
        if keys == 0 and nbytes == 0:
            txn.delete(k, db=self.meta)
        else:
            txn.put(k, _QQ.pack(keys, nbytes), db=self.meta)
        tk, tb = self.totals(txn)
        txn.put(K_TOTAL, _QQ.pack(tk + dkeys, tb + dbytes), db=self.meta)
        return keys, nbytes

    def totals(self, txn: lmdb.Transaction) -> tuple[int, int]:
        v = txn.get(K_TOTAL, db=self.meta)
        return _QQ.unpack(v) if v else (0, 0)

    def bin_counters(self) -> dict[int, tuple[int, int]]:
        """All non-empty bins of this worker (small: at most B entries)."""
        out: dict[int, tuple[int, int]] = {}
        with self.env.begin(db=self.meta) as txn:
            cur = txn.cursor()
            if cur.set_range(P_BIN):
                for k, v in cur:
                    if not k.startswith(P_BIN):
                        break
                    out[struct.unpack(">I", k[len(P_BIN):])[0]] = _QQ.unpack(v)
        return out

    # -- move markers: make every half of a bin move idempotent --------------------------------
    @staticmethod
    def _mark_key(epoch: int, b: int, side: str) -> bytes:
        return P_MARK + _Q.pack(epoch) + struct.pack(">I", b) + side.encode()

    def marker(self, txn: lmdb.Transaction, epoch: int, b: int, side: str) -> dict[str, Any] | None:
        v = txn.get(self._mark_key(epoch, b, side), db=self.meta)
        return json.loads(v) if v else None

    def set_marker(self, txn: lmdb.Transaction, epoch: int, b: int, side: str, info: dict[str, Any]) -> None:
        txn.put(self._mark_key(epoch, b, side), json.dumps(info).encode(), db=self.meta)

    # -- per-epoch worker metrics --------------------------------------------------------------
    def put_metrics(self, txn: lmdb.Transaction, epoch: int, doc: dict[str, Any]) -> None:
        txn.put(P_METRICS + _Q.pack(epoch), json.dumps(doc).encode(), db=self.meta)

    def get_metrics(self, epoch: int) -> dict[str, Any] | None:
        with self.env.begin(db=self.meta) as txn:
            v = txn.get(P_METRICS + _Q.pack(epoch), db=self.meta)
        return json.loads(v) if v else None

    # -- outbox ---------------------------------------------------------------------------------
    def put_outbox(self, txn: lmdb.Transaction, epoch: int, outputs: list[tuple[bytes, bytes]]) -> None:
        prefix = _Q.pack(epoch)
        items = [
            (prefix + struct.pack(">I", i), struct.pack(">I", len(k)) + k + v) for i, (k, v) in enumerate(outputs)
        ]
        if items:
            txn.cursor(db=self.outbox).putmulti(items, append=False)

    def read_outbox(self, txn: lmdb.Transaction, epoch: int) -> list[tuple[bytes, bytes]]:
        prefix = _Q.pack(epoch)
        out = []
        cur = txn.cursor(db=self.outbox)
        if cur.set_range(prefix):
            for k, v in cur:
                if not k.startswith(prefix):
                    break
                n = struct.unpack(">I", v[:4])[0]
                out.append((v[4:4 + n], v[4 + n:]))
        return out

    def gc(self, txn: lmdb.Transaction, epoch: int, keep_outbox: int = 2, keep_meta: int = 20) -> None:
        """Drop outbox entries older than `keep_outbox` epochs and old metrics/markers.

        Only a replay of the last uncommitted epoch ever re-reads them, so a couple of epochs of
        history is enough; the deleted ranges are proportional to a few epochs' outputs.
        """
        _delete_prefix_below(txn, self.outbox, b"", _Q.pack(max(epoch - keep_outbox, 0)))
        for p in (P_METRICS, P_MARK):
            _delete_prefix_below(txn, self.meta, p, p + _Q.pack(max(epoch - keep_meta, 0)))

    # -- bin ranges -----------------------------------------------------------------------------
    def export_bin(self, txn: lmdb.Transaction, b: int, k: int) -> list[tuple[bytes, bytes]]:
        lo, hi = bin_range(b, k)
        cur = txn.cursor(db=self.data)
        out = []
        if cur.set_range(lo):
            for key, v in cur:
                if hi is not None and key >= hi:
                    break
                out.append((key, v))
        return out

    def delete_bin(self, txn: lmdb.Transaction, b: int, k: int) -> int:
        lo, hi = bin_range(b, k)
        cur = txn.cursor(db=self.data)
        n = 0
        if cur.set_range(lo):
            while True:
                key = cur.key()
                if not key or (hi is not None and key >= hi):
                    break
                if not cur.delete():
                    break
                n += 1
        return n

    def import_bin(self, txn: lmdb.Transaction, items: Iterable[tuple[bytes, bytes]]) -> None:
        txn.cursor(db=self.data).putmulti(list(items))

    def iter_data(self) -> Iterable[tuple[bytes, bytes]]:
        """Every (store_key, state) pair of this worker: for tests and offline inspection only."""
        with self.env.begin(db=self.data) as txn:
            yield from txn.cursor(db=self.data)


def _delete_prefix_below(txn: lmdb.Transaction, db: Any, prefix: bytes, upper: bytes) -> None:
    cur = txn.cursor(db=db)
    if not cur.set_range(prefix):
        return
    while True:
        key = cur.key()
        if not key or not key.startswith(prefix) or key >= upper:
            break
        if not cur.delete():
            break


def read_all_state(root: str | Path, workers: Iterable[int]) -> dict[int, dict[bytes, bytes]]:
    """worker -> {store_key: state}; for tests and the throughput check."""
    out = {}
    for w in workers:
        if not worker_dir(root, w).exists():
            out[w] = {}
            continue
        with WorkerStore(root, w) as s:
            out[w] = dict(s.iter_data())
    return out
