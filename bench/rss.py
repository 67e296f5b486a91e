"""Resident memory of a process *tree* (the job's driver JVM, its Python workers, ...), sampled
in a background thread with psutil."""

from __future__ import annotations

import threading
import time

import psutil


def tree_rss_bytes(pid: int) -> int:
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


class RssSampler:
    """`with RssSampler(pid) as s: ...` then `s.samples` = [(unix time, MB), ...]."""

    def __init__(self, pid: int, interval_s: float = 0.25) -> None:
        self.pid, self.interval = pid, interval_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"rss-{pid}", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            rss = tree_rss_bytes(self.pid)
            if rss:
                self.samples.append((time.time(), rss / 2**20))
            self._stop.wait(self.interval)

    def start(self) -> "RssSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> "RssSampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def peak_mb(self, t0: float | None = None, t1: float | None = None) -> float:
        vals = [mb for t, mb in self.samples if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
        return max(vals) if vals else float("nan")

    def median_mb(self, t0: float | None = None, t1: float | None = None) -> float:
        vals = sorted(mb for t, mb in self.samples if (t0 is None or t >= t0) and (t1 is None or t <= t1))
        return vals[len(vals) // 2] if vals else float("nan")
