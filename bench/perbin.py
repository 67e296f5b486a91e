"""Per-row cost of a worker's epoch against the bin count B, without Spark (issue 13).

Why: the bin sweep (bench/REPORT.md §2) measures the operator's useful time per row inside a real
job, where Spark's own per-epoch cost and the machine's noise swamp a few µs per row. This drives
the very function a Spark task runs per epoch (`spark_jobs.worker.make_apply_fn`: durable
changelog object, executor-local LMDB cache, metrics) with Arrow tables shaped like `route`'s
output, and the driver's commit between epochs (`DurableState.commit_epoch`, snapshots, retention).

Worker 0 of W = 2 gets the same ~2 500 rows per epoch at every B (keys whose hash has its top bit
clear, so worker 0 owns them at every B under the uniform map); at B = 4096 it owns 2 048 bins and
the rows touch most of them. B values alternate within each round; the ratios are medians over rounds
of per-row time(B) / per-row time(B = 1) measured in the same round. Run:

    .venv/bin/python -m bench.perbin [--bins 1,16,256,4096] [--rows 2500] [--rounds 15] [--epochs 3]
    .venv/bin/python -m bench.perbin --profile 4096        # cProfile of B = 4096's epochs, top functions

Printed per B: `task` (the whole task: find_object, the cache transaction, object writes, outputs) and
`useful` (the task's own `useful_ms` metric, the figure of the bin sweep), each as µs/row and × B = 1.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from spark_jobs import bins as B
from spark_jobs.durable import DurableState, find_object
from spark_jobs.objects import read_meta
from spark_jobs.worker import ApplyConfig, make_apply_fn

WORKERS = 2


class _Task:
    """What `TaskContext.get()` gives the apply function: partition = worker."""

    def __init__(self, worker: int, stage: int) -> None:
        self._w, self._s = worker, stage

    def partitionId(self) -> int:  # noqa: N802 (pyspark's names)
        return self._w

    def stageId(self) -> int:  # noqa: N802
        return self._s

    def attemptNumber(self) -> int:  # noqa: N802
        return 0


@contextlib.contextmanager
def task_context(worker: int, stage: int) -> Iterator[None]:
    from pyspark import TaskContext

    saved = TaskContext.__dict__["get"]
    TaskContext.get = classmethod(lambda cls: _Task(worker, stage))  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        TaskContext.get = saved  # type: ignore[method-assign]


class Keys:
    """A fixed key space of worker 0's half: key i has a random 63-bit hash (top bit clear)."""

    def __init__(self, n: int, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.hashes = rng.integers(0, 1 << 63, size=n, dtype=np.int64)
        self.keys = pa.array([b"key-%d" % i for i in range(n)], pa.binary())
        self.rng = np.random.default_rng(seed + 1)

    def sample(self, rows: int) -> np.ndarray:
        return self.rng.integers(0, len(self.hashes), size=rows)

    def table(self, idx: np.ndarray, k: int, offset0: int) -> pa.Table:
        """`route`'s output for these key indices at B = 2^k: key, value, partition, offset, h, bin, worker."""
        h = self.hashes[idx]
        b = (h.view(np.uint64) >> np.uint64(64 - k)).astype(np.int32) if k else np.zeros(len(idx), np.int32)
        n = len(idx)
        return pa.table({
            "key": self.keys.take(pa.array(idx)), "value": pa.array([b"1"] * n, pa.binary()),
            "partition": pa.array(np.arange(n, dtype=np.int32) % 4), "offset": pa.array(offset0 + np.arange(n)),
            "h": pa.array(h), "bin": pa.array(b), "worker": pa.array(np.zeros(n, np.int32)),
        })


class Job:
    """One B's state store, caches and epoch counter; `epoch()` runs worker 0 timed, worker 1 and
    the driver's commit untimed."""

    def __init__(self, root: Path, bins: int) -> None:
        self.k = B.bits_for(bins)
        self.root = root / f"b{bins}"
        self.ds = DurableState(str(self.root / "state"), "perbin", bins)
        self.assignment = tuple(B.uniform_assignment(bins, WORKERS))
        self.ds.record_map(0, self.assignment)
        self.e = 0
        self.offset = 0

    def _cfg(self, snapshot: bool) -> ApplyConfig:
        return ApplyConfig(epoch=self.e, job="perbin", operator="keycount", bins_bits=self.k, workers=WORKERS,
                           assignment=self.assignment, state_uri=self.ds.uri, store_id=self.ds.store_id,
                           history=self.ds.history(before=self.e), output_topic="perbin.output",
                           dlq_topic="perbin.dlq", input_topic="in", cache_dir=str(self.root / "cache"),
                           snapshot=snapshot)

    def epoch(self, keys: Keys, idx: np.ndarray, prof: cProfile.Profile | None = None) -> tuple[float, float]:
        """(task seconds, useful seconds) of worker 0 on these rows."""
        snapshot = self.ds.snapshot_due(self.e)
        cfg = self._cfg(snapshot)
        fn = make_apply_fn(cfg)
        batches = keys.table(idx, self.k, self.offset).to_batches()
        self.offset += len(idx)
        with task_context(0, self.e):
            if prof is not None:
                prof.enable()
            t0 = time.perf_counter()
            list(fn(iter(batches)))
            dt = time.perf_counter() - t0
            if prof is not None:
                prof.disable()
        with task_context(1, self.e):
            list(fn(iter([])))
        obj = find_object(self.ds.uri, "changelog", self.e, 0)
        assert obj is not None
        useful = float(read_meta(obj)["metrics"]["useful_ms"]) / 1000
        self.ds.commit_epoch(self.e, 0, WORKERS, snapshot)
        self.ds.retain()
        self.e += 1
        return dt, useful


def run(args: argparse.Namespace) -> None:
    bins = [int(x) for x in args.bins.split(",")]
    if bins[0] != 1:
        bins = [1] + [b for b in bins if b != 1]
    keys = Keys(args.keys, args.seed)
    root = Path(tempfile.mkdtemp(prefix="ballast-bench-perbin-", dir=args.dir))
    prof = cProfile.Profile() if args.profile else None
    try:
        jobs = {b: Job(root, b) for b in bins}
        t = time.perf_counter()
        all_keys = np.arange(args.keys)
        for b in bins:  # prefill: every key once, so the measured epochs update existing state
            for chunk in np.array_split(all_keys, max(1, args.keys // 50_000)):
                jobs[b].epoch(keys, chunk)
        print(f"prefill {args.keys} keys x {len(bins)} stores: {time.perf_counter() - t:.1f} s", flush=True)
        task: dict[int, list[float]] = {b: [] for b in bins}
        useful: dict[int, list[float]] = {b: [] for b in bins}
        for r in range(args.warmup + args.rounds):
            rows = [keys.sample(args.rows) for _ in range(args.epochs)]
            order = bins[r % len(bins):] + bins[:r % len(bins)]  # rotate who runs first
            per: dict[int, tuple[float, float]] = {}
            for b in order:
                ts = [jobs[b].epoch(keys, idx, prof if b == args.profile and r >= args.warmup else None)
                      for idx in rows]
                n = args.rows * args.epochs
                per[b] = (sum(x for x, _ in ts) / n, sum(y for _, y in ts) / n)
            if r >= args.warmup:
                for b in bins:
                    task[b].append(per[b][0])
                    useful[b].append(per[b][1])
        print(f"rows/epoch {args.rows}, epochs/round {args.epochs}, rounds {args.rounds} (+{args.warmup} warm-up), "
              f"keys {args.keys}, W={WORKERS} (worker 0 timed)")
        print(f"{'B':>6} {'task us/row':>12} {'task xB=1':>10} {'useful us/row':>14} {'useful xB=1':>12}")
        for b in bins:
            rt = statistics.median(x / y for x, y in zip(task[b], task[1]))
            ru = statistics.median(x / y for x, y in zip(useful[b], useful[1]))
            print(f"{b:>6} {statistics.median(task[b]) * 1e6:>12.1f} {rt:>10.3f} "
                  f"{statistics.median(useful[b]) * 1e6:>14.1f} {ru:>12.3f}", flush=True)
        if prof is not None:
            st = pstats.Stats(prof)
            st.sort_stats(args.sort).print_stats(args.top)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bins", default="1,16,256,4096", help="B values, comma-separated; B = 1 is always the baseline")
    ap.add_argument("--rows", type=int, default=2500, help="rows per epoch of the timed worker")
    ap.add_argument("--keys", type=int, default=200_000, help="key space of the timed worker (prefilled)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=2, help="rounds run but not counted")
    ap.add_argument("--epochs", type=int, default=3, help="epochs per B per round")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--dir", default=None, help="where the stores go (default: a temp dir)")
    ap.add_argument("--profile", type=int, default=None, metavar="B", help="cProfile this B's measured epochs")
    ap.add_argument("--sort", default="tottime", help="pstats sort key for --profile")
    ap.add_argument("--top", type=int, default=30)
    run(ap.parse_args(argv))


if __name__ == "__main__":
    main()
