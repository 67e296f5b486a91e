"""RocksDB (rocksdict) vs LMDB (lmdb) on the work a worker store actually does.

Why: the state store choice decides per-epoch cost (point get+put of a key-count fold), the cost
of opening a store in whichever Python worker serves a partition this epoch, and the cost of a
bin move (range export, import, delete). Run:

    .venv/bin/python -m bench.stores [--keys 1000000] [--batch 100000] [--batches 5]

Keys are laid out as the data plane does: 8-byte big-endian hash + key bytes, so a bin (top k
bits) is one contiguous key range.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Any

BIN_BITS = 8


def make_keys(n: int, seed: int = 7) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        h = rng.getrandbits(64)
        out.append(struct.pack(">Q", h) + b"key-%d" % i)
    return out


def zipf_batch(keys: list[bytes], size: int, rng: random.Random) -> list[bytes]:
    # cheap Zipf-ish skew: index = n * u^3
    n = len(keys)
    return [keys[int(n * rng.random() ** 3)] for _ in range(size)]


def bin_range(b: int) -> tuple[bytes, bytes | None]:
    lo = b << (64 - BIN_BITS)
    hi = (b + 1) << (64 - BIN_BITS)
    return struct.pack(">Q", lo), (struct.pack(">Q", hi) if hi < 1 << 64 else None)


class LmdbStore:
    name = "lmdb"

    def __init__(self, path: str) -> None:
        import lmdb

        self.path = path
        self.env = lmdb.open(path, map_size=8 << 30, max_dbs=4, readahead=False)
        self.db = self.env.open_db(b"data")

    def reopen(self) -> None:
        import lmdb

        self.env.close()
        self.env = lmdb.open(self.path, map_size=8 << 30, max_dbs=4, readahead=False)
        self.db = self.env.open_db(b"data")

    def load(self, keys: list[bytes]) -> None:
        with self.env.begin(write=True, db=self.db) as txn:
            for k in sorted(keys):
                txn.put(k, struct.pack(">q", 0), append=True, db=self.db)

    def update(self, batch: list[bytes]) -> None:
        with self.env.begin(write=True, db=self.db) as txn:
            for k in batch:
                v = txn.get(k)
                c = struct.unpack(">q", v)[0] + 1 if v else 1
                txn.put(k, struct.pack(">q", c))

    def export_bin(self, b: int) -> list[tuple[bytes, bytes]]:
        lo, hi = bin_range(b)
        out = []
        with self.env.begin(db=self.db) as txn:
            cur = txn.cursor()
            if cur.set_range(lo):
                for k, v in cur:
                    if hi is not None and k >= hi:
                        break
                    out.append((k, v))
        return out

    def import_bin(self, items: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True, db=self.db) as txn:
            cur = txn.cursor()
            cur.putmulti(items)

    def delete_bin(self, b: int) -> None:
        lo, hi = bin_range(b)
        with self.env.begin(write=True, db=self.db) as txn:
            cur = txn.cursor()
            if cur.set_range(lo):
                while cur.key() and (hi is None or cur.key() < hi):
                    if not cur.delete():
                        break

    def close(self) -> None:
        self.env.close()


class RocksStore:
    name = "rocksdb"

    def __init__(self, path: str) -> None:
        self.path = path
        self._open()

    def _open(self) -> None:
        from rocksdict import AccessType, Options, Rdict, WriteOptions

        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        self.db = Rdict(self.path, options=opts, access_type=AccessType.read_write())
        wo = WriteOptions()
        wo.sync = True  # same durability as an LMDB commit
        self.db.set_write_options(wo)

    def reopen(self) -> None:
        self.db.close()
        self._open()

    def load(self, keys: list[bytes]) -> None:
        from rocksdict import WriteBatch

        wb = WriteBatch(raw_mode=True)
        for k in keys:
            wb.put(k, struct.pack(">q", 0))
        self.db.write(wb)

    def update(self, batch: list[bytes]) -> None:
        from rocksdict import WriteBatch

        # a write batch is RocksDB's unit of atomicity; reads see the committed state only, so
        # repeated keys inside one batch are folded in Python first (as the data plane does)
        counts: dict[bytes, int] = {}
        for k in batch:
            counts[k] = counts.get(k, 0) + 1
        wb = WriteBatch(raw_mode=True)
        for k, n in counts.items():
            v = self.db.get(k)
            c = struct.unpack(">q", v)[0] + n if v is not None else n
            wb.put(k, struct.pack(">q", c))
        self.db.write(wb)

    def export_bin(self, b: int) -> list[tuple[bytes, bytes]]:
        lo, hi = bin_range(b)
        out = []
        it = self.db.iter()
        it.seek(lo)
        while it.valid():
            k = it.key()
            if hi is not None and k >= hi:
                break
            out.append((k, it.value()))
            it.next()
        return out

    def import_bin(self, items: list[tuple[bytes, bytes]]) -> None:
        from rocksdict import Options, SstFileWriter

        sst = os.path.join(self.path + ".sst")
        w = SstFileWriter(options=Options(raw_mode=True))
        w.open(sst)
        for k, v in items:
            w[k] = v
        w.finish()
        self.db.ingest_external_file([sst])
        os.unlink(sst)

    def delete_bin(self, b: int) -> None:
        lo, hi = bin_range(b)
        self.db.delete_range(lo, hi if hi is not None else b"\xff" * 9)

    def close(self) -> None:
        self.db.close()


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    t = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t) * 1000, r


def bench(cls: Any, keys: list[bytes], batch: int, batches: int, root: str) -> dict[str, float]:
    path = os.path.join(root, cls.name)
    store = cls(path)
    res: dict[str, float] = {}
    res["load_ms"], _ = timed(lambda: store.load(keys))
    rng = random.Random(11)
    upd = []
    for _ in range(batches):
        b = zipf_batch(keys, batch, rng)
        ms, _ = timed(lambda b=b: store.update(b))
        upd.append(ms)
    res["update_100k_ms_median"] = sorted(upd)[len(upd) // 2]
    res["update_rows_per_s"] = batch / (res["update_100k_ms_median"] / 1000)
    opens = []
    for _ in range(5):
        ms, _ = timed(store.reopen)
        opens.append(ms)
    res["reopen_ms_median"] = sorted(opens)[2]
    ms, items = timed(lambda: store.export_bin(3))
    res["export_bin_ms"] = ms
    res["bin_keys"] = len(items)  # type: ignore[arg-type]
    res["bin_bytes"] = sum(len(k) + len(v) for k, v in items)  # type: ignore[union-attr,attr-defined]
    res["delete_bin_ms"], _ = timed(lambda: store.delete_bin(3))
    res["import_bin_ms"], _ = timed(lambda: store.import_bin(items))  # type: ignore[arg-type]
    # half the bins at once (all-at-once migration of half the state)
    t = time.perf_counter()
    moved = 0
    for b in range(0, 1 << BIN_BITS, 2):
        it = store.export_bin(b)
        store.delete_bin(b)
        store.import_bin(it)
        moved += len(it)
    res["half_bins_roundtrip_ms"] = (time.perf_counter() - t) * 1000
    res["half_bins_keys"] = moved
    store.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where to put the stores (default: a temp dir)")
    args = ap.parse_args()
    keys = make_keys(args.keys)
    root = tempfile.mkdtemp(prefix="ballast-bench-stores-", dir=args.dir)
    try:
        for cls in (LmdbStore, RocksStore):
            r = bench(cls, keys, args.batch, args.batches, root)
            print(cls.name, " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()),
                  flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
