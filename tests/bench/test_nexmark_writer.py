"""NEXMark writer against the real broker: rate, placement, scheduled times, every event read back."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from bench.nexmark.model import KINDS, from_json, key_of, kind_of
from bench.nexmark.writer import NexmarkSchedule, topics

pytestmark = pytest.mark.bench

REPO = Path(__file__).resolve().parents[2]


def _read_all(bootstrap: str, names: list[str], partitions: int) -> list:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                      auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        tps = [TopicPartition(t, p) for t in names for p in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        ends = c.end_offsets(tps)
        out = []
        while any(c.position(tp) < ends[tp] for tp in tps):
            for recs in c.poll(timeout_ms=2000).values():
                out += recs
        return out
    finally:
        c.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("pregenerate", [False, True])
def test_writer_open_loop_rate_and_every_event_back(kafka_bootstrap: str, make_topics, unique_name: str,
                                                    tmp_path: Path, pregenerate: bool) -> None:
    partitions, rate, count = 2, 400.0, 2000
    names = topics(unique_name)
    make_topics({t: partitions for t in names.values()})
    sched_file = tmp_path / "schedule.json"
    args = [sys.executable, "-m", "bench.nexmark.writer", "--bootstrap", kafka_bootstrap, "--topic-prefix", unique_name,
            "--partitions", str(partitions), "--rate", str(rate), "--events", str(count), "--seed", "3",
            "--max-disorder", "25", "--schedule-out", str(sched_file)] + (["--pregenerate"] if pregenerate else [])
    proc = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(sched_file.read_text())["stats"]
    assert stats["sent"] == count and not stats["stopped_early"]
    # open loop at a fixed rate: 2000 events at 400/s take ~5 s of sending, whatever the broker does
    assert abs(stats["achieved_rate"] - rate) / rate < 0.15, stats
    assert stats["max_send_lag_ms"] < 2000, stats

    sched = NexmarkSchedule.load(sched_file)
    cfg = sched.nexmark_config
    assert cfg.seed == 3 and cfg.max_disorder == 25 and cfg.base_time_ms == sched.t0_us // 1000
    expected: dict[str, list] = defaultdict(list)  # kind -> (position, event) in sending order
    for d in sched.deliveries():
        expected[kind_of(d.event)].append((d.position, d.event))
    assert {k: len(v) for k, v in expected.items()} == stats["per_kind"] == {"person": 40, "auction": 120, "bid": 1840}

    records = _read_all(kafka_bootstrap, list(names.values()), partitions)
    assert len(records) == count
    kind_of_topic = {t: k for k, t in names.items()}
    seen = set()
    for r in records:
        kind = kind_of_topic[r.topic]
        k = (r.offset - sched.base[r.topic][r.partition]) * partitions + r.partition  # deterministic placement
        position, ev = expected[kind][k]
        assert from_json(kind, r.value) == ev
        assert r.key == b"%d" % key_of(ev)
        assert r.timestamp == sched.sched_us(position) // 1000  # CreateTime = scheduled time
        seen.add(position)
    assert seen == set(range(count))
    assert set(KINDS) == set(expected)


def test_writer_refuses_missing_topics(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.nexmark.writer", "--bootstrap", kafka_bootstrap,
                           "--topic-prefix", unique_name, "--rate", "100", "--events", "10",
                           "--schedule-out", str(tmp_path / "s.json")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "do not exist" in proc.stderr and unique_name in proc.stderr
