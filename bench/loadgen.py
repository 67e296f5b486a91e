"""Open-loop Kafka load generator (runs as its own process: `python -m bench.loadgen ...`).

Open loop: record i has a *scheduled* emission time fixed in advance by the rate schedule, and
the generator never waits for the system under test. Every record carries its scheduled time
(value = microseconds since the epoch as ASCII, Kafka CreateTime = the same in ms), so latency is
measured from when the record *should* have entered the system, not when the generator managed to
send it: a generator that falls behind adds to latency instead of hiding it (no coordinated
omission).

Placement is deterministic, so a record's scheduled time can be recovered from (partition,
offset) alone without reading the input back: record i goes to partition i % P, and since the
topic is written only by this process (idempotent producer, ordered per partition) its offset is
base[p] + i // P. `Schedule.sched_s(i)` inverts that. The generator writes the schedule (t0,
segments, base offsets, keys, distribution) to a JSON file before sending, and its own lag stats
at the end.

Keys: uniform or Zipf(s) over N keys `k%09d`, from a seeded numpy generator (same seed, same
sequence). Zipf ranks are mapped to key ids by a seeded permutation so hot keys land in random
bins.

Sentences (`--words W`, for the word-count operator): each record's value is W keys drawn the
same way, joined by spaces, and its Kafka key is null. The scheduled time is then only in the
Kafka CreateTime (and in the schedule: (partition, offset) still gives it back).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ballast.options import settings


def key_bytes(i: int) -> bytes:
    return b"k%09d" % i


@dataclass
class Segment:
    """Rate `rate` rows/s from `start_s` to `end_s` (seconds after t0)."""

    start_s: float
    end_s: float
    rate: float

    @property
    def count(self) -> int:
        return int(round((self.end_s - self.start_s) * self.rate))


@dataclass
class Schedule:
    t0: float  # unix seconds of scheduled time 0
    segments: list[Segment]
    partitions: int
    base: list[int] = field(default_factory=list)  # offset of record 0..P-1 in each partition
    keys: int = 0
    dist: str = "uniform"
    zipf_s: float = 1.0
    seed: int = 1

    @property
    def total(self) -> int:
        return sum(s.count for s in self.segments)

    def _starts(self) -> np.ndarray:
        return np.cumsum([0] + [s.count for s in self.segments])

    def sched_s(self, idx: np.ndarray | int) -> np.ndarray:
        """Scheduled unix time (s) of record index/indices `idx`."""
        idx = np.asarray(idx, dtype=np.int64)
        starts = self._starts()
        seg = np.clip(np.searchsorted(starts, idx, side="right") - 1, 0, len(self.segments) - 1)
        st = np.array([s.start_s for s in self.segments])[seg]
        rate = np.array([s.rate for s in self.segments])[seg]
        return self.t0 + st + (idx - starts[seg]) / rate

    def index_of(self, partition: int | np.ndarray, offset: int | np.ndarray) -> np.ndarray:
        p = np.asarray(partition, dtype=np.int64)
        o = np.asarray(offset, dtype=np.int64)
        base = np.asarray(self.base, dtype=np.int64)[p]
        return (o - base) * self.partitions + p

    def sched_of_offsets(self, partition: int, lo: int, hi: int) -> np.ndarray:
        """Scheduled times of offsets [lo, hi) of one partition (only records of this schedule)."""
        offs = np.arange(lo, hi, dtype=np.int64)
        idx = self.index_of(partition, offs)
        idx = idx[(idx >= 0) & (idx < self.total)]
        return self.sched_s(idx)

    def to_dict(self) -> dict:
        d = asdict(self)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Schedule:
        d = dict(d)
        d["segments"] = [Segment(**s) for s in d["segments"]]
        return cls(**d)

    @classmethod
    def load(cls, path: str | Path) -> Schedule:
        return cls.from_dict(json.loads(Path(path).read_text())["schedule"])


class KeySampler:
    def __init__(self, keys: int, dist: str = "uniform", zipf_s: float = 1.0, seed: int = 1) -> None:
        self.keys, self.dist = keys, dist
        self.rng = np.random.default_rng(seed)
        if dist == "zipf":
            w = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** zipf_s
            self.cdf = np.cumsum(w) / w.sum()
            self.perm = np.random.default_rng(seed + 7919).permutation(keys)
        elif dist != "uniform":
            raise ValueError(f"unknown distribution {dist!r}")

    def sample(self, n: int) -> np.ndarray:
        if self.dist == "uniform":
            return self.rng.integers(0, self.keys, n)
        ranks = np.searchsorted(self.cdf, self.rng.random(n), side="right")
        return self.perm[np.minimum(ranks, self.keys - 1)]


def parse_segments(spec: str) -> list[Segment]:
    """'5000:30,10000:60' = 5000 rows/s for 30 s, then 10000 rows/s for 60 s."""
    out, t = [], 0.0
    for part in spec.split(","):
        rate, dur = part.split(":")
        out.append(Segment(t, t + float(dur), float(rate)))
        t += float(dur)
    return out


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        e = c.end_offsets(tps)
        return [int(e[tp]) for tp in tps]
    finally:
        c.close()


def sentence(ids: np.ndarray) -> bytes:
    return b" ".join(key_bytes(int(i)) for i in ids)


def run(bootstrap: str, topic: str, partitions: int, segments: list[Segment], keys: int, dist: str,
        zipf_s: float, seed: int, schedule_out: Path, start_delay_s: float = 1.0, tick_s: float = 0.002,
        words: int = 0) -> dict:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2, batch_size=256 * 1024,
                             max_in_flight_requests_per_connection=5, enable_idempotence=True)
    sched = Schedule(t0=time.time() + start_delay_s, segments=segments, partitions=partitions,
                     base=end_offsets(bootstrap, topic, partitions), keys=keys, dist=dist, zipf_s=zipf_s, seed=seed)
    tmp = schedule_out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"schedule": sched.to_dict()}))
    os.replace(tmp, schedule_out)
    sampler = KeySampler(keys, dist, zipf_s, seed)
    total = sched.total
    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    i = 0
    max_lag = 0.0
    lag_sum = 0.0
    chunk_keys = sampler.sample(min(total, 65536))
    ck = 0
    while i < total and not stop["flag"]:
        now = time.time()
        # every record scheduled at or before now is due; compute how many (vectorised per tick)
        hi = i
        step = 1024
        while hi < total and sched.sched_s(min(hi + step, total) - 1) <= now:
            hi = min(hi + step, total)
        if hi < total and sched.sched_s(hi) <= now:
            lo_, hi_ = hi, min(hi + step, total)
            ts = sched.sched_s(np.arange(lo_, hi_))
            hi = lo_ + int(np.searchsorted(ts, now, side="right"))
        if hi == i:
            nxt = float(sched.sched_s(i))
            time.sleep(max(0.0, min(tick_s, nxt - now)))
            continue
        ts_all = sched.sched_s(np.arange(i, hi))
        need = max(1, words)
        for j in range(i, hi):
            if ck + need > len(chunk_keys):
                chunk_keys = sampler.sample(65536)
                ck = 0
            t_s = float(ts_all[j - i])
            us = int(t_s * 1e6)
            if words:
                producer.send(topic, key=None, value=sentence(chunk_keys[ck:ck + words]),
                              partition=j % partitions, timestamp_ms=us // 1000)
            else:
                producer.send(topic, key=key_bytes(int(chunk_keys[ck])), value=b"%d" % us,
                              partition=j % partitions, timestamp_ms=us // 1000)
            ck += need
        lag = now - float(ts_all[0])
        max_lag = max(max_lag, lag)
        lag_sum += lag * (hi - i)
        i = hi
    producer.flush(timeout=60)
    producer.close()
    stats = {"sent": i, "planned": total, "max_send_lag_ms": max_lag * 1000,
             "mean_send_lag_ms": (lag_sum / i * 1000) if i else 0.0, "stopped_early": i < total}
    doc = json.loads(schedule_out.read_text())
    doc["stats"] = stats
    schedule_out.write_text(json.dumps(doc))
    return stats


def prefill(bootstrap: str, topic: str, partitions: int, keys: int, words: int = 0) -> int:
    """Write every key once (closed loop, as fast as possible): the state the benchmark migrates.
    Returns the number of records written.

    Values are b"0" (no scheduled time): these records are never measured. With `words`, every
    key once as a word, in sentences of `words` consecutive keys (⌈keys/words⌉ records).
    """
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20, batch_size=512 * 1024,
                             enable_idempotence=True)
    n = 0
    if words:
        for n, lo in enumerate(range(0, keys, words), start=1):
            producer.send(topic, key=None, value=sentence(np.arange(lo, min(lo + words, keys))),
                          partition=(n - 1) % partitions)
    else:
        for k in range(keys):
            producer.send(topic, key=key_bytes(k), value=b"0", partition=k % partitions)
        n = keys
    producer.flush(timeout=300)
    producer.close()
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.loadgen", description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=settings().kafka_bootstrap)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rate", default=None, help="'R:S[,R:S...]' rows/s for seconds")
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--dist", default="uniform", choices=["uniform", "zipf"])
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--schedule-out", default=None)
    ap.add_argument("--words", type=int, default=0,
                    help="sentences of this many keys as values (word count); 0: one key per record")
    ap.add_argument("--prefill", action="store_true", help="write every key once, then exit")
    a = ap.parse_args(argv)
    if a.words < 0:
        ap.error("--words must be >= 0")
    if a.prefill:
        n = prefill(a.bootstrap, a.topic, a.partitions, a.keys, a.words)
        print(json.dumps({"prefilled": n}))
        return 0
    if not a.rate or not a.schedule_out:
        ap.error("--rate and --schedule-out are required unless --prefill")
    stats = run(a.bootstrap, a.topic, a.partitions, parse_segments(a.rate), a.keys, a.dist, a.zipf_s, a.seed,
                Path(a.schedule_out), words=a.words)
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
