"""Unit tests of the benchmark harness pieces that need neither Kafka nor Spark (fast)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bench.ballast_job import half_of_half, make_steps, offset_ranges, record_latencies
from bench.hist import LogHistogram, timeline
from bench.loadgen import KeySampler, Schedule, Segment, parse_segments
from bench.rss import RssSampler, rss_bytes

pytestmark = pytest.mark.bench


def test_histogram_percentiles_within_one_percent() -> None:
    rng = np.random.default_rng(3)
    v = rng.lognormal(mean=4, sigma=1.2, size=200_000)
    h = LogHistogram()
    h.record(v[:100_000])
    h2 = LogHistogram()
    h2.record(v[100_000:])
    h.merge(h2)
    assert h.total == v.size
    assert h.max == pytest.approx(v.max())
    for p in (50, 90, 99, 99.9):
        assert h.percentile(p) == pytest.approx(np.percentile(v, p), rel=0.012)
    x, y = h.cdf()
    assert y[-1] == pytest.approx(1.0) and np.all(np.diff(y) >= 0)


def test_timeline_keeps_empty_windows() -> None:
    t = np.array([0.1, 0.2, 1.1])
    rows = timeline(t, np.array([5.0, 7.0, 100.0]), t_ref=0.0, window_s=0.25)
    assert [r.count for r in rows] == [2, 0, 0, 0, 1]
    assert rows[0].max_ms == 7.0 and math.isnan(rows[1].max_ms)
    assert rows[0].throughput == pytest.approx(8.0)


def test_schedule_maps_offsets_back_to_scheduled_times() -> None:
    s = Schedule(t0=1000.0, segments=parse_segments("100:10,200:5"), partitions=2, base=[7, 3])
    assert s.total == 2000
    idx = np.arange(s.total)
    ts = s.sched_s(idx)
    assert ts[0] == 1000.0 and ts[999] == pytest.approx(1000 + 9.99)
    assert ts[1000] == pytest.approx(1010.0) and ts[1001] == pytest.approx(1010.005)
    assert np.all(np.diff(ts) > 0)
    # record i sits in partition i % 2 at offset base + i // 2
    assert s.sched_of_offsets(1, 3, 5).tolist() == pytest.approx([ts[1], ts[3]])
    assert s.sched_of_offsets(0, 0, 9).tolist() == pytest.approx([ts[0], ts[2]])  # prefill offsets skipped
    d = Schedule.from_dict(json.loads(json.dumps(s.to_dict())))
    assert d.sched_s(1500) == pytest.approx(s.sched_s(1500))


def test_key_sampler_is_deterministic_and_zipf_is_skewed() -> None:
    a, b = KeySampler(1000, "zipf", 1.1, 5).sample(20000), KeySampler(1000, "zipf", 1.1, 5).sample(20000)
    assert (a == b).all()
    counts = np.bincount(a, minlength=1000)
    assert counts.max() > 20 * np.median(counts)
    u = KeySampler(1000, "uniform", seed=5).sample(20000)
    assert u.min() >= 0 and u.max() < 1000 and np.bincount(u).max() < 60


def test_half_of_half_moves_a_quarter_of_the_bins() -> None:
    uni = [b * 2 // 64 for b in range(64)]
    half = half_of_half(uni, 2)
    moved = [b for b in range(64) if uni[b] != half[b]]
    assert len(moved) == 16 and all(uni[b] == 0 and half[b] == 1 for b in moved)


@pytest.mark.parametrize("strategy,steps", [("all-at-once", 1), ("fluid", 16), ("batched", 4), ("batched-gap", 4)])
def test_make_steps_compose_to_the_target(strategy: str, steps: int) -> None:
    from ballast.policy import apply_moves

    uni = [b * 2 // 64 for b in range(64)]
    half = half_of_half(uni, 2)
    plan = make_steps(uni, 3, half, 2, 2, [10] * 64, [1.0] * 64, strategy, 4)
    assert len(plan) == steps
    cur = uni
    for i, st in enumerate(plan):
        assert st.map_version == 3 + i
        cur = apply_moves(cur, st.moves)
    assert cur == half


@pytest.mark.parametrize("frm,to", [(1, 2), (2, 1), (2, 4), (4, 2)])
def test_batched_steps_are_valid_for_the_job_when_growing_and_shrinking(frm: int, to: int) -> None:
    """Every intermediate map must fit the step's W (the job rejects a step that leaves a bin on a
    worker >= W): growing raises W with the first step, shrinking lowers it with the last."""
    from ballast.policy import apply_moves, place

    cur = [b * frm // 64 for b in range(64)]
    target = place(cur, to, [1.0] * 64, [10] * 64)
    plan = make_steps(cur, 0, target, frm, to, [10] * 64, [1.0] * 64, "batched", 4)
    assert len(plan) > 1
    for st in plan:
        cur = apply_moves(cur, st.moves)
        assert max(cur) < st.workers, (st.step, st.workers)
    assert cur == target and plan[-1].workers == to


def test_offset_log_and_latency(tmp_path: Path) -> None:
    d = tmp_path / "spark" / "offsets"
    d.mkdir(parents=True)
    meta = '{"batchWatermarkMs":0}'
    (d / "0").write_text(f'v1\n{meta}\n{{"j.control":{{"0":0}},"in":{{"0":2,"1":2}}}}')
    (d / "1").write_text(f'v1\n{meta}\n{{"j.control":{{"0":0}},"in":{{"0":5,"1":4}}}}')
    r = offset_ranges(tmp_path, "in")
    assert r == {0: {0: (0, 2), 1: (0, 2)}, 1: {0: (2, 5), 1: (2, 4)}}
    # prefill of 2 per partition, then records 0..4 at 10 rows/s from t0=100
    s = Schedule(t0=100.0, segments=[Segment(0, 1, 10)], partitions=2, base=[2, 2])
    lat = record_latencies(s, r, {0: 99.0, 1: 101.0})
    assert lat.lat_ms.size == 5  # only open-loop records are measured
    assert sorted(lat.lat_ms.round(3).tolist()) == pytest.approx([600, 700, 800, 900, 1000])
    lat2 = record_latencies(s, r, {0: 99.0})
    assert lat2.unanswered == 5 and lat2.lat_ms.size == 0


def test_rss_sampler_sees_this_process() -> None:
    import os
    import time

    tree, root = rss_bytes(os.getpid())
    assert tree >= root > 10 * 2**20
    with RssSampler(os.getpid(), 0.02) as s:
        deadline = time.time() + 30  # the sampler's thread gets the CPU late on a loaded machine
        while len(s.samples) < 2 and time.time() < deadline:
            time.sleep(0.05)
    assert len(s.samples) >= 2 and s.peak_mb() >= s.median_mb() > 10
    assert len(s.root_samples) == len(s.samples)
    # a childless process (not pytest itself, which may own a Spark JVM by now): root = whole tree
    import subprocess
    import sys

    lone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.5)
        with RssSampler(lone.pid, 0.02) as s:
            time.sleep(0.15)
    finally:
        lone.kill()
        lone.wait()
    assert s.samples and s.peak_mb(root=True) == pytest.approx(s.peak_mb(), rel=0.01)


def test_rss_sampler_separates_the_root_from_its_children() -> None:
    import subprocess
    import sys
    import time

    # the child says when its 200 MB are allocated (a fixed sleep raced a slow start on a loaded machine)
    child = subprocess.Popen([sys.executable, "-c", "b = bytearray(200 * 2**20); print('ready', flush=True); "
                              "import time; time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        import os

        with RssSampler(os.getpid(), 0.02) as s:
            time.sleep(0.2)
    finally:
        child.kill()
        child.wait()
    # the 200 MB child counts in the tree, not in the root
    assert s.peak_mb() - s.peak_mb(root=True) > 150


def test_report_writers(tmp_path: Path) -> None:
    from bench import report as rp

    h = LogHistogram()
    h.record(np.array([1.0, 10.0, 100.0]))
    tl = timeline(np.array([0.1, 0.6]), np.array([3.0, 4.0]), 0.0)
    assert rp.plot_timelines(tmp_path / "t.png", {"a": (tl, [(0.2, 0.4)])}, "x").stat().st_size > 1000
    assert rp.plot_cdf(tmp_path / "c.png", {"a": h}, "x").exists()
    assert rp.plot_bars(tmp_path / "b.png", ["a", "b"], {"m": [1.0, float("nan")]}, "x").exists()
    rp.write_csv(tmp_path / "x.csv", [{"a": 1.23456, "b": float("nan")}])
    assert (tmp_path / "x.csv").read_text().splitlines() == ["a,b", "1.235,"]
    rp.write_json(tmp_path / "s.json", {"x": float("nan"), "y": np.float64(2.0)})
    assert json.loads((tmp_path / "s.json").read_text()) == {"x": None, "y": 2.0}
    assert "| a |" in rp.md_table([{"a": 1.0}], ["a"])


def test_offset_ranges_skip_epochs_without_a_known_start(tmp_path: Path) -> None:
    d = tmp_path / "spark" / "offsets"
    d.mkdir(parents=True)
    (d / "7").write_text('v1\n{}\n{"in":{"0":9}}')
    (d / "8").write_text('v1\n{}\n{"in":{"0":12}}')
    assert offset_ranges(tmp_path, "in") == {8: {0: (9, 12)}}
    # ends remembered from earlier (Spark deleted file 6): epoch 7 gets its start back
    assert offset_ranges(tmp_path, "in", {6: {0: 4}}) == {7: {0: (4, 9)}, 8: {0: (9, 12)}}
