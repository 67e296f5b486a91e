"""Open-loop NEXMark writer: the generator's events into Kafka at a fixed rate
(`python -m bench.nexmark.writer ...`, its own process like bench/loadgen.py).

Topics: one per kind, `<prefix>.person`, `<prefix>.auction`, `<prefix>.bid`, so a query reads only
the kinds it needs and a join reads two topics. Values are the records' JSON (model.to_json);
keys are the id a query joins on first (person id, auction id, a bid's auction: model.key_of).
Q3/Q8 key auctions by seller instead; Ballast routes by a column it computes, not by the Kafka key.

Open loop, as in bench/loadgen.py: delivery position i has the scheduled time
t0 + i · inter_event_delay (or 1/--send-rate: a backlog sent faster than its event time advances),
fixed before the run; the writer never waits for the job, and every
record's Kafka CreateTime is its scheduled time (ms), so latency = visible − scheduled. Event
time starts at t0 too (config.base_time_ms = t0 in ms unless given), so an event's event time is
its scheduled time, give or take the configured disorder. Placement is deterministic: the k-th
record of a kind goes to partition k mod P of its topic, at offset base[topic][p] + k div P.
The schedule (t0, delay, config, base offsets) is written to a JSON file before the first send,
so the exact event set can be regenerated (generator.deliveries) for the reference answers, and
the writer's own lag stats are added at the end.

Throughput: generating costs about as much CPU as kafka-python's send (~20k events per CPU-second
each on the reference machine). `--pregenerate` generates all events before t0 (with event time
relative to 0; they are shifted by base_time_ms when sent, which is exact because every time
field is base + something independent of the base), so only the send is on the clock, at the
price of ~0.5 KB of memory per event.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from ballast.options import settings
from bench.nexmark.generator import Delivered, deliveries, delivery_numbers
from bench.nexmark.model import (
    AUCTION_PROPORTION,
    KINDS,
    PERSON_PROPORTION,
    PROPORTION_DENOMINATOR,
    Event,
    NexmarkConfig,
    key_of,
    kind_of,
    to_json,
)


def topics(prefix: str) -> dict[str, str]:
    """kind -> topic name."""
    return {k: f"{prefix}.{k}" for k in KINDS}


@dataclass
class NexmarkSchedule:
    """What the run promised: when each delivery position is due and which events it carries."""

    t0_us: int
    count: int
    partitions: int
    topic_prefix: str
    config: dict[str, Any]
    base: dict[str, list[int]]  # topic -> offset of the kind's record 0..P-1 in each partition
    send_delay_us: int = 0  # between two sends; 0: the event-time spacing (config.rate)

    @property
    def nexmark_config(self) -> NexmarkConfig:
        return NexmarkConfig.from_dict(self.config)

    @property
    def delay_us(self) -> int:
        """Scheduled time between two delivery positions."""
        return self.send_delay_us or self.nexmark_config.inter_event_delay_us

    def sched_us(self, position: int) -> int:
        """Scheduled time (µs since the epoch) of delivery position `position`."""
        return self.t0_us + position * self.delay_us

    def deliveries(self, sent: int | None = None) -> list[Delivered]:
        """The events of the first `sent` positions (default all planned): what a job read, for the
        reference answers. A run stopped early sent `stats["sent"]` of them."""
        return list(deliveries(self.nexmark_config, self.count if sent is None else min(sent, self.count)))

    @classmethod
    def load(cls, path: str | Path) -> NexmarkSchedule:
        return cls(**json.loads(Path(path).read_text())["schedule"])


class OffsetClock:
    """The scheduled time of any record the writer sent, from its topic, partition and offset.

    A benchmark times a job's epochs by the input offsets they read (Spark's offset log), as
    bench.loadgen.Schedule does for one topic; here the k-th record of a kind is at partition
    k mod P, offset base + k div P, and carries the delivery position of the k-th event of that
    kind in delivery order (numbers only: nothing is generated, so millions of events take seconds)."""

    def __init__(self, sched: NexmarkSchedule) -> None:
        import numpy as np

        nums = np.asarray(delivery_numbers(sched.nexmark_config, sched.count), dtype=np.int64)
        rem = nums % PROPORTION_DENOMINATOR
        kind = np.where(rem < PERSON_PROPORTION, 0, np.where(rem < PERSON_PROPORTION + AUCTION_PROPORTION, 1, 2))
        names = topics(sched.topic_prefix)
        self.positions = {names[k]: np.flatnonzero(kind == i) for i, k in enumerate(KINDS)}
        self.sched = sched
        self.delay_us = sched.delay_us

    def times_s(self, topic: str, partition: int, lo: int, hi: int) -> Any:
        """Scheduled times (unix s, a numpy array) of offsets [lo, hi); offsets the writer did not
        write (before its base, beyond what it planned) are left out."""
        import numpy as np

        pos = self.positions.get(topic)
        if pos is None or partition >= self.sched.partitions:
            return np.array([])
        base = self.sched.base[topic][partition]
        k = (np.arange(max(lo, base), hi, dtype=np.int64) - base) * self.sched.partitions + partition
        k = k[k < pos.size]
        return (self.sched.t0_us + pos[k] * self.delay_us) / 1e6


def _shifted_json(event: Event, base_ms: int) -> bytes:
    d = dict(vars(event))
    d["date_time"] += base_ms
    if "expires" in d:
        d["expires"] += base_ms
    return json.dumps(d, separators=(",", ":")).encode()


def _end_offsets(bootstrap: str, names: list[str], partitions: int) -> dict[str, list[int]]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        found = c.topics()
        missing = [t for t in names if t not in found]
        if missing:
            raise RuntimeError(f"topics {missing} do not exist; create them first (bench.infra.ensure_topics)")
        tps = {t: [TopicPartition(t, p) for p in range(partitions)] for t in names}
        ends = c.end_offsets([tp for v in tps.values() for tp in v])
        return {t: [int(ends[tp]) for tp in v] for t, v in tps.items()}
    finally:
        c.close()


def run(bootstrap: str, topic_prefix: str, partitions: int, config: NexmarkConfig, count: int,
        schedule_out: Path, start_delay_s: float = 1.0, tick_s: float = 0.002,
        keep_base_time: bool = False, pregenerate: bool = False, send_rate: float | None = None) -> dict[str, Any]:
    """Send `count` events open-loop at config.rate (or `send_rate`: a backlog written faster than its
    event time advances); returns the writer's stats (also in the file)."""
    from kafka import KafkaProducer

    if count < 1 or partitions < 1:
        raise ValueError(f"count ({count}) and partitions ({partitions}) must be >= 1")
    names = topics(topic_prefix)
    ready = list(deliveries(replace(config, base_time_ms=0), count)) if pregenerate else None
    t0_us = int((time.time() + start_delay_s) * 1e6)
    if not keep_base_time:
        config = replace(config, base_time_ms=t0_us // 1000)
    sched = NexmarkSchedule(t0_us=t0_us, count=count, partitions=partitions, topic_prefix=topic_prefix,
                            config=config.to_dict(), base=_end_offsets(bootstrap, list(names.values()), partitions),
                            send_delay_us=int(round(1e6 / send_rate)) if send_rate else 0)
    tmp = schedule_out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"schedule": asdict(sched)}))
    os.replace(tmp, schedule_out)

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2, batch_size=256 * 1024,
                             max_in_flight_requests_per_connection=5, enable_idempotence=True)
    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(flag=True))
    delay_us = sched.delay_us
    per_kind = dict.fromkeys(KINDS, 0)
    it = iter(ready) if ready is not None else deliveries(config, count)
    shift = config.base_time_ms if ready is not None else 0
    sent = 0
    max_lag = lag_sum = 0.0
    first_send = last_send = 0.0
    while sent < count and not stop["flag"]:
        now = time.time()
        due = min(count, int((now * 1e6 - t0_us) // delay_us) + 1)
        if due <= sent:
            time.sleep(max(0.0, min(tick_s, (t0_us + sent * delay_us) / 1e6 - now)))
            continue
        lag = now - (t0_us + sent * delay_us) / 1e6
        max_lag = max(max_lag, lag)
        lag_sum += lag * (due - sent)
        first_send = first_send or now
        for d in it:
            kind = kind_of(d.event)
            k = per_kind[kind]
            per_kind[kind] = k + 1
            value = _shifted_json(d.event, shift) if shift else to_json(d.event)
            producer.send(names[kind], key=b"%d" % key_of(d.event), value=value, partition=k % partitions,
                          timestamp_ms=(t0_us + d.position * delay_us) // 1000)
            sent += 1
            if sent >= due:
                break
        last_send = time.time()
    producer.flush(timeout=60)
    producer.close()
    span = last_send - first_send
    stats = {"sent": sent, "planned": count, "per_kind": per_kind, "max_send_lag_ms": max_lag * 1000,
             "mean_send_lag_ms": lag_sum / sent * 1000 if sent else 0.0, "send_span_s": span,
             "achieved_rate": (sent - 1) / span if span > 0 and sent > 1 else 0.0, "stopped_early": sent < count}
    doc = json.loads(schedule_out.read_text())
    doc["stats"] = stats
    schedule_out.write_text(json.dumps(doc))
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.nexmark.writer", description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default=settings().kafka_bootstrap)
    ap.add_argument("--topic-prefix", required=True, help="topics <prefix>.person/.auction/.bid (must exist)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rate", type=float, required=True, help="events per second (of event time, and sent)")
    ap.add_argument("--send-rate", type=float, default=None,
                    help="send at this rate instead (a backlog: event time still advances at --rate)")
    ap.add_argument("--events", type=int, required=True, help="how many events to send")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-disorder", type=int, default=0, help="out-of-order bound, in events")
    ap.add_argument("--base-time-ms", type=int, default=None,
                    help="event time of event 0 (default: the scheduled start, so event time ~ wall clock)")
    ap.add_argument("--schedule-out", required=True)
    ap.add_argument("--pregenerate", action="store_true",
                    help="generate every event before the start (only the sends are timed; ~0.5 KB/event)")
    a = ap.parse_args(argv)
    try:
        cfg = NexmarkConfig(rate=a.rate, seed=a.seed, max_disorder=a.max_disorder,
                            **({"base_time_ms": a.base_time_ms} if a.base_time_ms is not None else {}))
    except ValueError as exc:
        ap.error(str(exc))
    if a.events < 1 or a.partitions < 1:
        ap.error("--events and --partitions must be >= 1")
    if a.send_rate is not None and not a.send_rate > 0:
        ap.error("--send-rate must be > 0 events/s")
    try:
        stats = run(a.bootstrap, a.topic_prefix, a.partitions, cfg, a.events, Path(a.schedule_out),
                    keep_base_time=a.base_time_ms is not None, pregenerate=a.pregenerate, send_rate=a.send_rate)
    except RuntimeError as exc:
        print(f"bench.nexmark.writer: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
