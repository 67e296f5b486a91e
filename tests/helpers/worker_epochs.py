"""Worker epochs without Spark: `Harness` drives spark_jobs.worker._run per worker task (each on a
chosen 'executor' cache dir) and then the driver's commit (spark_jobs.durable), the way the runner
does, with a pure-Python reference of counts. Used by the worker, durable-state and cache-fallback
tests (tests/spark_jobs/test_worker.py, test_durable.py, test_cache_fallback.py)."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pyarrow as pa

from spark_jobs import bins as B
from spark_jobs.cache import WorkerCache
from spark_jobs.durable import DurableState, read_state
from spark_jobs.operators import decode_count
from spark_jobs.worker import ApplyConfig, _run

K = 3  # 8 bins


class Harness:
    """Drives epochs like the runner does: tasks per worker (each on a chosen 'executor' cache
    dir), then the driver's commit; keeps a pure-Python reference of counts and outputs."""

    def __init__(self, root: Path, workers: int = 2, snapshot_every: int = 3, operator: str = "keycount") -> None:
        self.root = root
        self.uri = str(root / "state")
        self.ds = DurableState(self.uri, "j", 1 << K, snapshot_every=snapshot_every)
        self.k = K  # raised by split(), lowered by merge()
        self.assignment = B.uniform_assignment(1 << K, workers)
        self.workers = workers
        self.version = 0
        self.epoch = 0
        self.operator = operator
        self.ref: Counter[bytes] = Counter()
        self.rng = random.Random(5)
        self.hashes: dict[bytes, int] = {}
        self.executor_of = {w: "exec-a" for w in range(workers)}

    def h(self, key: bytes) -> int:
        if key not in self.hashes:
            self.hashes[key] = self.rng.getrandbits(64) - (1 << 63)
        return self.hashes[key]

    def table(self, keys: list[bytes], worker: int, values: list[bytes] | None = None) -> pa.Table | None:
        rows = [(k, (values[i] if values else b"1"), 0, i) for i, k in enumerate(keys)
                if self.assignment[B.bin_of_hash(self.h(k), self.k)] == worker]
        if not rows:
            return None
        ks, vs, ps, os_ = zip(*rows)
        hs = [self.h(k) for k in ks]
        return pa.table({"key": pa.array(ks, pa.binary()), "value": pa.array(vs, pa.binary()),
                         "partition": pa.array(ps, pa.int32()), "offset": pa.array(os_, pa.int64()),
                         "h": pa.array(hs, pa.int64()),
                         "bin": pa.array([B.bin_of_hash(x, self.k) for x in hs], pa.int32()),
                         "worker": pa.array([worker] * len(ks), pa.int32())})

    def cfg(self, moving_in=None, warm=None, snapshot=False) -> ApplyConfig:
        return ApplyConfig(epoch=self.epoch, job="j", operator=self.operator, bins_bits=self.k, base_bits=K,
                           workers=self.workers,
                           assignment=tuple(self.assignment), state_uri=self.ds.uri, store_id=self.ds.store_id,
                           history=self.ds.history(before=self.epoch), output_topic="j.output", dlq_topic="j.dlq",
                           input_topic="in", snapshot=snapshot, moving_in=moving_in or {}, warm=warm or {})

    def task(self, cfg: ApplyConfig, worker: int, keys: list[bytes], executor: str,
             values: list[bytes] | None = None) -> list:
        t = self.table(keys, worker, values)
        n = t.num_rows if t is not None else 0
        cache = WorkerCache(self.root / executor, cfg.store_id, "j", worker)
        try:
            return cache.write(lambda txn: _run(cfg, cache, txn, worker, t, n, f"att-{executor}", 0.0, 0.0))
        finally:
            cache.close()

    def run_epoch(self, keys: list[bytes], moves=(), warm=None, values=None) -> tuple[list, list[dict]]:
        moving_in: dict[int, tuple[int, ...]] = {}
        if moves:
            for b, src, dst in moves:
                assert self.assignment[b] == src
                self.assignment[b] = dst
                moving_in[dst] = moving_in.get(dst, ()) + (b,)
            self.version += 1
        self.ds.record_map(self.version, self.assignment)
        tasks = max([self.workers] + [w + 1 for w in (warm or {})])
        snapshot = self.ds.snapshot_due(self.epoch)
        cfg = self.cfg(moving_in, warm, snapshot)
        outs = []
        for w in range(tasks):
            outs += self.task(cfg, w, keys, self.executor_of.get(w, "exec-a"), values)
        docs = self.ds.commit_epoch(self.epoch, self.version, tasks, snapshot)
        self.ds.retain()
        for k in keys:
            self.ref[k] += 1
        self.epoch += 1
        return outs, docs

    def split(self, bits: int) -> None:
        """A split step: the map's bin count becomes 2^bits, every bin's halves stay on its worker."""
        from ballast.bin_maps import split_assignment

        self.assignment = split_assignment(self.assignment, 1 << bits)
        self.k = bits
        self.version += 1

    def merge(self, bits: int) -> None:
        """A merge step: the map's bin count becomes 2^bits; each new bin's parts must share a worker."""
        from ballast.bin_maps import merge_assignment, unmerged_siblings

        assert not unmerged_siblings(self.assignment, 1 << bits), "move the parts together first"
        self.assignment = merge_assignment(self.assignment, 1 << bits)
        self.k = bits
        self.version += 1

    def durable_counts(self) -> dict[bytes, int]:
        got: dict[bytes, int] = {}
        for b, kv in read_state(self.uri).items():
            for sk, v in kv.items():
                key, st = B.decode_entry(sk, v)
                assert B.bin_of_store_key(sk, self.k) == b
                got[key] = decode_count(st)
        return got


def keys_of(n: int, seed: int) -> list[bytes]:
    r = random.Random(seed)
    return [b"k%d" % r.randrange(200) for _ in range(n)]
