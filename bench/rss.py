"""Resident memory of a process *tree* (the job's driver JVM, its Python workers, ...) and of its
root alone, sampled in a background thread with psutil.

Why both: the tree is what the machine pays, but Spark respawns Python workers (each ~0.1-0.3 GB)
whenever it likes, which swamps a migration's own memory. Ballast moves bins in the job's Python
driver (the root of the tree), so the root's RSS is the one that shows what a strategy costs."""

from __future__ import annotations

import threading
import time

import psutil


def rss_bytes(pid: int) -> tuple[int, int]:
    """(whole tree, root alone) in one pass over the process tree; (0, 0) once it is gone."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0
    total = root_rss = 0
    for p in procs:
        try:
            rss = p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total += rss
        if p is root:
            root_rss = rss
    return total, root_rss


class RssSampler:
    """`with RssSampler(pid) as s: ...` then `s.samples` = [(unix time, tree MB), ...] and
    `s.root_samples` = [(unix time, root process MB), ...]."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid, self.interval = pid, interval_s
        self.samples: list[tuple[float, float]] = []
        self.root_samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"rss-{pid}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.time()
            tree, root = rss_bytes(self.pid)
            if tree:
                self.samples.append((t, tree / 2**20))
            if root:
                self.root_samples.append((t, root / 2**20))
            self._stop.wait(self.interval)

    def start(self) -> RssSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> RssSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _window(self, t0: float | None, t1: float | None, root: bool) -> list[float]:
        src = self.root_samples if root else self.samples
        return [mb for t, mb in src if (t0 is None or t >= t0) and (t1 is None or t <= t1)]

    def peak_mb(self, t0: float | None = None, t1: float | None = None, root: bool = False) -> float:
        vals = self._window(t0, t1, root)
        return max(vals) if vals else float("nan")

    def median_mb(self, t0: float | None = None, t1: float | None = None, root: bool = False) -> float:
        vals = sorted(self._window(t0, t1, root))
        return vals[len(vals) // 2] if vals else float("nan")
