"""The spike experiment's pure parts (bench.experiments.spike, bench.padded): the target map, the
operator's state layout, and the summary and README built from recorded session rows (no Spark)."""

from __future__ import annotations

import math
import struct

import pytest

from bench.experiments.spike import SPIKE_SMOKE, profile_for, readme, summarize, swap_half
from bench.padded import ENV, PaddedCount

pytestmark = pytest.mark.bench


def test_swap_half_moves_every_other_bin_of_every_worker() -> None:
    uniform = [b * 2 // 16 for b in range(16)]
    target = swap_half(uniform, 2)
    moved = [b for b in range(16) if target[b] != uniform[b]]
    assert moved == list(range(0, 16, 2))
    assert sum(1 for b in moved if uniform[b] == 0) == sum(1 for b in moved if uniform[b] == 1) == 4
    assert swap_half(target, 2) == uniform  # the way back is the same function


def test_padded_count_keeps_the_count_and_a_fixed_size_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "300")
    op = PaddedCount()
    s1, out1 = op.fold(b"k1", None, [b"a", b"b"])
    s2, out2 = op.fold(b"k1", s1, [b"c"])
    assert s1 is not None and s2 is not None
    assert len(s1) == len(s2) == 300 and s1[8:] == s2[8:] and s1[8:] != PaddedCount().fold(b"k2", None, [b""])[0][8:]
    assert struct.unpack(">q", s2[:8])[0] == 3 and out1 == [(b"k1", b"2")] and out2 == [(b"k1", b"3")]
    assert PaddedCount().fold(b"k1", None, [b"a", b"b"]) == (s1, out1)  # deterministic


def _row(strategy: str, max_ms: float, steps: list[float], moved: int) -> dict[str, object]:
    return {"role": "measured", "strategy": strategy, "max_latency_ms": max_ms, "p99_latency_ms": max_ms * 0.9,
            "duration_s": 2.0 * len(steps), "bytes_moved": moved + 10**8,
            "state_bytes_moved": moved, "keys_moved": moved // 1000, "bins_moved": 128,
            "steps": len(steps), "step_ms": steps, "move_ms_max_step": max(steps), "max_epoch_batch_ms": 900.0,
            "max_epoch_gap_s": 1.1, "steady_p99_ms": 1000.0}


def test_summary_ratios_and_goals_from_recorded_rows() -> None:
    r = {"migrations": [{"role": "setup", "strategy": "all-at-once"},
                        _row("all-at-once", 24_000.0, [9000.0], 1_150_000_000),
                        _row("batched", 1_400.0, [500.0] * 16, 1_150_000_000),
                        _row("fluid", 1_300.0, [40.0] * 128, 1_150_000_000),
                        _row("batched-precopy", 1_200.0, [20.0] * 16, 1_150_000_000)],
         "steady": {"p99_ms": 1_000.0}, "state": {"keys": 2_200_000, "bytes": 2_300_000_000},
         "loadavg_start": [1.0, 1.0, 1.0], "loadavg_end": [2.0, 2.0, 2.0]}
    s = summarize(SPIKE_SMOKE, r)
    assert set(s["max_latency_ms"]) == {"all-at-once", "batched", "fluid", "batched-precopy"}
    assert s["all_at_once_over_batched"] == pytest.approx(24_000 / 1_400)
    assert s["batched_max_over_steady_p99"] == pytest.approx(1.4)
    assert s["batched_precopy_max_over_steady_p99"] == pytest.approx(1.2)
    assert s["goals"] == {"all_at_once_moved_ge_1gb": True, "all_at_once_over_batched_ge_10": True,
                          "batched_max_over_steady_p99_le_1_5": True}
    assert s["step_ms"]["batched"] == [500.0] * 16
    assert s["max_over_steady_p99"]["fluid"] == pytest.approx(1.3) and s["all_at_once_over"]["fluid"] == pytest.approx(
        24_000 / 1_300)
    text = readme(s)
    assert "| all-at-once |" in text and "17.14×" in text and "500 / 500" in text


def test_summary_of_a_failed_session_has_nans_not_errors() -> None:
    s = summarize(SPIKE_SMOKE, {})
    assert math.isnan(s["all_at_once_over_batched"]) and s["goals"]["all_at_once_over_batched_ge_10"] is None
    assert readme(s).startswith("# Spike")


def test_profile_overrides_are_checked() -> None:
    class P:
        name = "smoke"
        extra = {"spike": {"keys": 5, "strategies": ["batched"]}}

    class C:
        profile = P()

    p = profile_for(C())  # type: ignore[arg-type]
    assert p.keys == 5 and p.strategies == ("batched",)
    P.extra = {"spike": {"nope": 1}}
    with pytest.raises(ValueError):
        profile_for(C())  # type: ignore[arg-type]
