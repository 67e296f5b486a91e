"""A worker's local state cache: one LMDB environment per (state store, worker) on the executor.

Only a cache: the durable state (spark_jobs.durable) is the truth, and every entry here can be
rebuilt from it. Why LMDB for the cache (measured in docs/dataplane.md): a store is opened by
whichever Python worker process serves the partition this epoch — LMDB opens in ~0.3 ms and is
safe for several processes, and its write transaction serializes two task attempts of one worker
that land on the same executor.

Sub-databases (one write transaction covers them all):
* `data`: store key -> state value (store key layout: `spark_jobs.keys`); a bin is a key range.
* `meta`: `owner` (job, store id, worker: a cache refuses to serve another's), `last_applied`,
  per-bin `at` (the epoch whose state the bin holds), per-bin counters (keys, bytes), totals, and
  `bits` (the k its bin numbers are at; a split step raises the job's k, see `ensure_bits`).

The map grows on demand (MapFullError → double, retry), so a growing state never sticks the job.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lmdb
import numpy as np

from ballast.errors import BallastError
from ballast.options import settings
from spark_jobs.bins import bin_of_store_key, bin_range

INITIAL_MAP = settings().cache_map_bytes
MAX_MAP = settings().cache_max_map_bytes
MIN_FREE_BYTES = 1 << 20  # what a new cache needs free before LMDB maps its files (_check_room)

K_LAST = b"last_applied"
K_TOTAL = b"total"
K_OWNER = b"owner"
K_OWNED = b"owned"
K_BITS = b"bits"
P_BIN = b"bin/"
P_AT = b"at/"
_QQ = struct.Struct(">qq")
_Q = struct.Struct(">q")
_I = struct.Struct(">I")
T = TypeVar("T")


def _bitmap(bins: set[int]) -> bytes:
    """`bins` as a big-endian integer with bit b set per bin b (what `owned` reads), in numpy:
    shifting a Python int per bin is quadratic in B."""
    if not bins:
        return b"\x00"
    flags = np.zeros(max(bins) // 8 * 8 + 8, dtype=bool)
    flags[list(bins)] = True
    return np.packbits(flags, bitorder="little")[::-1].tobytes()


class CacheError(BallastError, RuntimeError):
    """The local cache cannot be used (full disk, unreadable files); says what to do. An epoch
    runs on, on a rebuilt cache (spark_jobs.cache_fallback)."""


class CacheOwnerError(CacheError):
    """The cache's place holds another job's or store's cache: never deleted, not used."""


def _check_room(path: Path) -> None:
    """A new cache needs room for its files first: LMDB maps its lock file and writes to the map,
    and a write to a page the full disk cannot back kills the process (SIGBUS), with no error."""
    if (path / "lock.mdb").exists():
        return
    free = shutil.disk_usage(path).free
    if free < MIN_FREE_BYTES:
        raise OSError(errno.ENOSPC, f"{free} bytes free, a new cache needs {MIN_FREE_BYTES}", str(path))


def cache_path(root: str | Path, store_id: str, worker: int) -> Path:
    return Path(root) / f"store-{store_id}" / f"worker-{worker:04d}"


def default_cache_root(job: str) -> str:
    """On an executor: its own work/local dir (a new executor starts empty and rebuilds)."""
    from pyspark import SparkFiles

    try:
        base = SparkFiles.getRootDirectory()
    except Exception:
        base = os.getcwd()
    return os.path.join(base, "ballast-cache", job)


class WorkerCache:
    """One worker's cache. Cheap to open; open it per task and close it after."""

    def __init__(self, root: str | Path, store_id: str, job: str, worker: int) -> None:
        self.worker = worker
        self.path = cache_path(root, store_id, worker)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            _check_room(self.path)
            self.env = lmdb.open(str(self.path), map_size=INITIAL_MAP, max_dbs=4, readahead=False, max_readers=64)
        except (OSError, lmdb.Error) as exc:
            raise CacheError(f"cannot open the local state cache {self.path}: {exc}. Free space or point "
                             "--cache-dir at a writable local disk; the durable state is untouched") from exc
        try:
            self.data = self.env.open_db(b"data")
            self.meta = self.env.open_db(b"meta")
            owner = {"job": job, "store_id": store_id, "worker": worker}
            with self.env.begin(write=True, db=self.meta) as txn:
                raw = txn.get(K_OWNER, db=self.meta)
                self.created = raw is None  # a new (or emptied) cache: every bin loads from durable state
                if raw is None:
                    txn.put(K_OWNER, json.dumps(owner, sort_keys=True).encode(), db=self.meta)
                    found = owner
                else:
                    found = json.loads(raw)
        except (lmdb.Error, ValueError) as exc:
            self.env.close()
            raise CacheError(f"the local state cache {self.path} is unreadable: {exc}") from exc
        if found != owner:
            self.env.close()
            raise CacheOwnerError(f"cache {self.path} belongs to {found}, not {owner}; delete it")

    def close(self) -> None:
        self.env.close()

    def __enter__(self) -> WorkerCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, fn: Callable[[Any], T]) -> T:
        """Run fn(txn) in one write transaction; grow the map and retry when it is full."""
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return fn(txn)
            except lmdb.MapFullError:
                size = self.env.info()["map_size"]
                if size * 2 > MAX_MAP:
                    raise CacheError(f"cache {self.path} reached BALLAST_CACHE_MAX_MAP_BYTES={MAX_MAP}") from None
                self.env.set_mapsize(size * 2)
            except lmdb.DiskError as exc:
                raise CacheError(f"local disk full under {self.path}: {exc}. Nothing was committed; free space "
                                 "or move --cache-dir; the job rebuilds from durable state") from exc

    # -- epochs ---------------------------------------------------------------------------------
    def last_applied(self, txn: Any) -> int:
        v = txn.get(K_LAST, db=self.meta)
        return _Q.unpack(v)[0] if v else -1

    def set_last_applied(self, txn: Any, epoch: int) -> None:
        txn.put(K_LAST, _Q.pack(epoch), db=self.meta)

    def set_bin_at(self, txn: Any, b: int, epoch: int) -> None:
        txn.put(P_AT + _I.pack(b), _Q.pack(epoch), db=self.meta)

    def owned(self, txn: Any) -> set[int]:
        """The bins that were current at `last_applied` (one bitmap: no per-bin write per epoch)."""
        v = txn.get(K_OWNED, db=self.meta)
        if not v:
            return set()
        return set(np.flatnonzero(np.unpackbits(np.frombuffer(v, np.uint8)[::-1], bitorder="little")).tolist())

    def set_owned(self, txn: Any, epoch: int, owned: set[int], warm: set[int], warm_epoch: int) -> None:
        """Commit point of an epoch: owned bins are at `epoch`, warm bins at `warm_epoch`."""
        txn.put(K_OWNED, _bitmap(owned), db=self.meta)
        for b in [b for b in self._at_entries(txn) if b in owned]:  # few: only loaded or warm bins
            txn.delete(P_AT + _I.pack(b), db=self.meta)
        for b in warm:
            self.set_bin_at(txn, b, warm_epoch)
        self.set_last_applied(txn, epoch)

    def cached_bins(self, txn: Any) -> dict[int, int]:
        """bin -> the epoch whose state it holds, for every bin this cache holds."""
        last = self.last_applied(txn)
        out: dict[int, int] = {b: last for b in self.owned(txn)}
        out.update(self._at_entries(txn))
        return out

    def _at_entries(self, txn: Any) -> dict[int, int]:
        out: dict[int, int] = {}
        cur = txn.cursor(db=self.meta)
        if cur.set_range(P_AT):
            for k, v in cur:
                if not k.startswith(P_AT):
                    break
                out[_I.unpack(k[len(P_AT):])[0]] = _Q.unpack(v)[0]
        return out

    # -- bin numbering ------------------------------------------------------------------------
    def bits(self, txn: Any, default: int) -> int:
        """The k the cache's bin numbers are at (`default`, the job's first k, for a cache that
        never recorded one: it predates any split)."""
        v = txn.get(K_BITS, db=self.meta)
        return _I.unpack(v)[0] if v else default

    def ensure_bits(self, txn: Any, k: int, default: int) -> None:
        """Renumber the cache's bins to `k` after a split raised the job's bin count or a merge
        lowered it; counters are recounted from the keys (one scan of the cached data, once per
        split or merge). No key is rewritten: a bin is a key range at any k.

        Split (d = k − old k): bin b at the old k is bins b·2^d .. b·2^d + 2^d − 1, each at b's epoch.
        Merge (d = old k − k): bin p is the parts p·2^d .. (p+1)·2^d − 1. When the cache holds every
        part, p is held at the oldest part's epoch (owned when every part was): a catch-up from there
        replays changes a newer part already has, which puts the same values again, as changelogs
        hold values, not deltas. A part missing makes p incomplete: the parts held are dropped and p
        is loaded whole when the worker needs it."""
        old = self.bits(txn, default)
        if old == k:
            return
        owned, at, last = self.owned(txn), self._at_entries(txn), self.last_applied(txn)
        new_at: dict[int, int]
        if old < k:
            d = k - old
            children = {b: range(b << d, (b + 1) << d) for b in set(owned) | set(at)}
            new_at = {part: epoch for b, epoch in at.items() for part in children[b]}
            new_owned = {part for b in owned for part in children[b]}
        else:
            d = old - k
            cached = {**{b: last for b in owned}, **at}
            new_at, new_owned = {}, set[int]()
            for p in sorted({b >> d for b in cached}):
                parts = range(p << d, (p + 1) << d)
                if all(c in cached for c in parts):
                    if all(c in owned and c not in at for c in parts):
                        new_owned.add(p)
                    else:
                        new_at[p] = min(cached[c] for c in parts)
                else:
                    for c in parts:
                        if c in cached:
                            self.drop_bin(txn, c, old)
        for key in self._meta_keys(txn, P_BIN) + self._meta_keys(txn, P_AT):
            txn.delete(key, db=self.meta)
        counts: dict[int, list[int]] = {}
        for sk, v in txn.cursor(db=self.data):
            kb = counts.setdefault(bin_of_store_key(sk, k), [0, 0])
            kb[0] += 1
            kb[1] += len(sk) + len(v)
        for b, (n, nbytes) in counts.items():
            txn.put(P_BIN + _I.pack(b), _QQ.pack(n, nbytes), db=self.meta)
        for b, epoch in new_at.items():
            self.set_bin_at(txn, b, epoch)
        self.set_owned(txn, last, new_owned, set(), last)
        txn.put(K_BITS, _I.pack(k), db=self.meta)

    def _meta_keys(self, txn: Any, prefix: bytes) -> list[bytes]:
        out: list[bytes] = []
        cur = txn.cursor(db=self.meta)
        if cur.set_range(prefix):
            for key in cur.iternext(values=False):
                if not key.startswith(prefix):
                    break
                out.append(key)
        return out

    # -- counters -------------------------------------------------------------------------------
    def bin_counter(self, txn: Any, b: int) -> tuple[int, int]:
        v = txn.get(P_BIN + _I.pack(b), db=self.meta)
        return _QQ.unpack(v) if v else (0, 0)

    def bin_counters(self, txn: Any, bins: list[int]) -> list[tuple[int, int]]:
        """Counters of many bins in one cursor pass (an epoch's metrics at B = 4096 read ~1 500)."""
        keys = [P_BIN + _I.pack(b) for b in bins]
        found = dict(txn.cursor(db=self.meta).getmulti(keys)) if keys else {}
        return [_QQ.unpack(v) if (v := found.get(k)) else (0, 0) for k in keys]

    def add_bin_counter(self, txn: Any, b: int, dkeys: int, dbytes: int) -> tuple[int, int]:
        keys, nbytes = self.bin_counter(txn, b)
        keys, nbytes = keys + dkeys, nbytes + dbytes
        k = P_BIN + _I.pack(b)
        if keys == 0 and nbytes == 0:
            txn.delete(k, db=self.meta)
        else:
            txn.put(k, _QQ.pack(keys, nbytes), db=self.meta)
        tk, tb = self.totals(txn)
        txn.put(K_TOTAL, _QQ.pack(tk + dkeys, tb + dbytes), db=self.meta)
        return keys, nbytes

    def add_bin_counters(self, txn: Any, deltas: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
        """Many bins' deltas at once (an epoch's fold): the totals are read and written once, not
        once per bin — at B = 4096 that was most of the per-bin cost of an epoch."""
        out: dict[int, tuple[int, int]] = {}
        tdk = tdb = 0
        meta = self.meta
        for b, (dk, db) in deltas.items():
            k = P_BIN + _I.pack(b)
            v = txn.get(k, db=meta)
            keys, nbytes = _QQ.unpack(v) if v else (0, 0)
            keys, nbytes = keys + dk, nbytes + db
            if keys == 0 and nbytes == 0:
                txn.delete(k, db=meta)
            else:
                txn.put(k, _QQ.pack(keys, nbytes), db=meta)
            out[b] = (keys, nbytes)
            tdk += dk
            tdb += db
        if tdk or tdb:
            tk, tb = self.totals(txn)
            txn.put(K_TOTAL, _QQ.pack(tk + tdk, tb + tdb), db=meta)
        return out

    def totals(self, txn: Any) -> tuple[int, int]:
        v = txn.get(K_TOTAL, db=self.meta)
        return _QQ.unpack(v) if v else (0, 0)

    # -- bins -----------------------------------------------------------------------------------
    def drop_bin(self, txn: Any, b: int, k: int) -> None:
        """Forget bin b entirely (its keys, counters and epoch)."""
        lo, hi = bin_range(b, k)
        cur = txn.cursor(db=self.data)
        if cur.set_range(lo):
            while True:
                key = cur.key()
                if not key or (hi is not None and key >= hi):
                    break
                if not cur.delete():
                    break
        keys, nbytes = self.bin_counter(txn, b)
        self.add_bin_counter(txn, b, -keys, -nbytes)
        txn.delete(P_AT + _I.pack(b), db=self.meta)

    def apply_changes(self, txn: Any, b: int, keys: list[bytes], values: list[bytes | None]) -> tuple[int, int]:
        """Put/delete a batch of bin b's changes (from the durable state); returns (puts, bytes)."""
        data = self.data
        dk = dbytes = 0
        nbytes = 0
        for sk, v in zip(keys, values):
            old = txn.get(sk, db=data)
            if v is None:
                if old is not None:
                    txn.delete(sk, db=data)
                    dk -= 1
                    dbytes -= len(sk) + len(old)
                continue
            txn.put(sk, v, db=data)
            nbytes += len(sk) + len(v)
            if old is None:
                dk += 1
                dbytes += len(sk) + len(v)
            else:
                dbytes += len(v) - len(old)
        if dk or dbytes:
            self.add_bin_counter(txn, b, dk, dbytes)
        return len(keys), nbytes

    def export_bins(self, txn: Any, bins: set[int], k: int) -> tuple[list[int], list[bytes], list[bytes]]:
        """(bin of each entry, store keys, values) of every entry of `bins`, in key order: one
        cursor pass per run of consecutive bins (a snapshot at B = 4096 reads 2 048 bins)."""
        out_keys: list[bytes] = []
        out_vals: list[bytes] = []
        order = sorted(bins)
        runs = np.split(np.asarray(order, dtype=np.int64), np.flatnonzero(np.diff(order) != 1) + 1) if order else []
        cur = txn.cursor(db=self.data)
        for run in runs:
            lo, _ = bin_range(int(run[0]), k)
            _, hi = bin_range(int(run[-1]), k)
            if cur.set_range(lo):
                for key, v in cur:
                    if hi is not None and key >= hi:
                        break
                    out_keys.append(key)
                    out_vals.append(v)
        prefixes = np.frombuffer(b"".join(key[:8] for key in out_keys), dtype=">u8")
        of = (prefixes >> np.uint64(64 - k)).astype(np.int64) if k else np.zeros(len(out_keys), np.int64)
        return of.tolist(), out_keys, out_vals
