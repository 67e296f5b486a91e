"""A small HDR-style latency histogram and the 250 ms timeline.

`LogHistogram` keeps counts in logarithmic buckets: bucket i covers [lo·g^(i-1), lo·g^i) with
g = 1 + 2·rel_err, and reports a bucket by its geometric midpoint, so any percentile is within
`rel_err` (default 1 %) of the true value (values below `lo`, 10 µs, share the first bucket). Recording
is vectorised (numpy arrays of latencies in ms); histograms merge by adding counts. The exact
min/max are kept on the side, so `max` is exact, not bucketed (Megaphone reports max latency).

No PyPI `hdrhistogram` dependency: this is ~60 lines and does what the benchmark needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99, 100.0)


class LogHistogram:
    def __init__(self, lo_ms: float = 0.01, hi_ms: float = 3.6e6, rel_err: float = 0.01) -> None:
        self.lo, self.hi = lo_ms, hi_ms
        self.log_g = math.log1p(2 * rel_err)  # bucket width 2·err → midpoint within err of any value
        self.n_buckets = int(math.ceil(math.log(hi_ms / lo_ms) / self.log_g)) + 2
        self.counts = np.zeros(self.n_buckets, dtype=np.int64)
        self.total = 0
        self.min = math.inf
        self.max = -math.inf
        self.sum = 0.0

    def _index(self, v: np.ndarray) -> np.ndarray:
        v = np.clip(v, self.lo, self.hi)
        return np.minimum((np.log(v / self.lo) / self.log_g).astype(np.int64) + 1, self.n_buckets - 1)

    def record(self, values_ms: np.ndarray | list[float] | float) -> None:
        v = np.atleast_1d(np.asarray(values_ms, dtype=np.float64))
        if v.size == 0:
            return
        # latencies can be slightly negative only through clock noise: clamp into the first bucket
        self.counts += np.bincount(self._index(v), minlength=self.n_buckets)
        self.total += int(v.size)
        self.min = min(self.min, float(v.min()))
        self.max = max(self.max, float(v.max()))
        self.sum += float(v.sum())

    def merge(self, other: LogHistogram) -> LogHistogram:
        self.counts += other.counts
        self.total += other.total
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        self.sum += other.sum
        return self

    def _value(self, i: int) -> float:
        if i == 0:
            return self.lo
        lo = self.lo * math.exp((i - 1) * self.log_g)
        return lo * math.exp(self.log_g / 2)  # bucket midpoint (geometric)

    def percentile(self, p: float) -> float:
        if self.total == 0:
            return math.nan
        if p >= 100.0:
            return self.max
        rank = max(1, int(math.ceil(p / 100.0 * self.total)))
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        return min(max(self._value(i), self.min), self.max)

    @property
    def mean(self) -> float:
        return self.sum / self.total if self.total else math.nan

    def summary(self) -> dict[str, float]:
        d = {"count": self.total, "mean_ms": self.mean, "min_ms": self.min if self.total else math.nan}
        for p in PERCENTILES:
            d[f"p{p:g}_ms"] = self.percentile(p)
        d["max_ms"] = self.max if self.total else math.nan
        return d

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """(latency ms, fraction <= it) over the non-empty buckets."""
        nz = np.nonzero(self.counts)[0]
        if nz.size == 0:
            return np.array([]), np.array([])
        cum = np.cumsum(self.counts)[nz] / self.total
        vals = np.array([self._value(int(i)) for i in nz])
        vals[-1] = self.max
        return vals, cum


@dataclass
class TimelineRow:
    t_s: float  # window start, seconds since the run's reference time
    count: int
    max_ms: float
    p99_ms: float
    p50_ms: float
    throughput: float  # outputs answered per second in this window


def timeline(t_out_s: np.ndarray, lat_ms: np.ndarray, t_ref: float, window_s: float = 0.25) -> list[TimelineRow]:
    """Per `window_s` window of *output time*: how many records were answered and their latency.

    Windows with no answered record are kept (count 0, NaN latencies): gaps are what a stall
    looks like.
    """
    if t_out_s.size == 0:
        return []
    rel = t_out_s - t_ref
    w = np.floor(rel / window_s).astype(np.int64)
    order = np.argsort(w, kind="stable")
    w, lat = w[order], lat_ms[order]
    uniq, starts = np.unique(w, return_index=True)
    ends = np.append(starts[1:], w.size)
    by = {int(u): (s, e) for u, s, e in zip(uniq, starts, ends)}
    rows = []
    for k in range(int(uniq.min()), int(uniq.max()) + 1):
        if k in by:
            s, e = by[k]
            seg = lat[s:e]
            rows.append(TimelineRow(k * window_s, int(e - s), float(seg.max()), float(np.percentile(seg, 99)),
                                    float(np.percentile(seg, 50)), (e - s) / window_s))
        else:
            rows.append(TimelineRow(k * window_s, 0, math.nan, math.nan, math.nan, 0.0))
    return rows
