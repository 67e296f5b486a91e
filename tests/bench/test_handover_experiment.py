"""The handover experiment's pure parts (bench.experiments.handover, bench.padded_windows): the
summary's goal ratios and README from recorded session rows, and the operator's declared windows
(no Spark)."""

from __future__ import annotations

import math

import pytest

from bench.experiments.handover import HANDOVER_FULL, HANDOVER_SMOKE, readme, summarize, window_figures

pytestmark = pytest.mark.bench


def _row(strategy: str, max_ms: float, moved: int) -> dict[str, object]:
    return {"role": "measured", "strategy": strategy, "max_latency_ms": max_ms, "p99_latency_ms": max_ms * 0.9,
            "duration_s": 3.0, "bytes_moved": moved, "keys_moved": moved // 3000, "bins_moved": 32,
            "max_epoch_batch_ms": max_ms / 2}


def test_the_summary_holds_the_issues_keys_and_goals() -> None:
    r = {"migrations": [_row("all-at-once", 9000.0, 300_000_000), _row("handover", 1050.0, 0),
                        _row("batched-precopy", 2500.0, 310_000_000)],
         "steady": {"p99_ms": 1000.0}, "state": {"keys": 200_000, "bytes": 650_000_000}}
    s = summarize(HANDOVER_FULL, r)
    assert s["max_over_steady_p99"] == pytest.approx(1.05) and s["bytes_moved"] == 0
    assert s["transfer_max_over_steady_p99"] == pytest.approx(9.0)
    assert s["precopy_max_over_steady_p99"] == pytest.approx(2.5)
    assert s["goals"] == {"max_over_steady_p99_le_1_1": True, "bytes_moved_0": True, "state_ge_500mb": True}
    text = readme(s)
    assert "Handover max ÷ steady p99: **1.05**" in text and "650 MB" in text


def test_the_summary_counts_the_rows_each_input_row_reached_in_the_overlap() -> None:
    """Epochs 0-1 steady (each row to one worker), 2-3 in the handover (half the rows to both)."""
    epochs = [{"epoch": e, "started_at": 100.0 + 10 * e, "input_rows": 100, "batch_ms": 500.0 + 100 * e}
              for e in range(4)]
    epochs.append({"epoch": 4, "started_at": 140.0, "input_rows": 0, "batch_ms": 9.0})  # no input: not counted
    wm = [{"epoch": e, "worker": w, "records_in": 50 if e < 2 else 75, "useful_ms": 10.0 * e + w}
          for e in range(5) for w in (0, 1)]
    ho = {**_row("handover", 1050.0, 0), "t_emit": 120.0, "t_end": 150.0}
    r = {"migrations": [ho], "steady": {"p99_ms": 1000.0}, "state": {}, "epochs": epochs, "worker_metrics": wm}
    assert window_figures(r, 120.0, 150.0) == {"rows_per_input": 1.5, "batch_ms": 750.0, "max_useful_ms": 26.0}
    assert window_figures(r, 100.0, 120.0)["rows_per_input"] == 1.0
    assert math.isnan(window_figures(r, 0.0, 10.0)["rows_per_input"])
    s = summarize(HANDOVER_FULL.__class__(steady_s=20.0), r)
    assert s["overlap_rows_per_input"] == 1.5 and s["steady"]["rows_per_input"] == 1.0
    assert "| overlap | 1.500 | 750 | 26 |" in readme(s)


def test_a_run_without_a_handover_says_so_rather_than_passing() -> None:
    r = {"migrations": [_row("all-at-once", 9000.0, 1)], "steady": {"p99_ms": 1000.0}, "state": {}}
    s = summarize(HANDOVER_SMOKE, r)
    assert math.isnan(s["max_over_steady_p99"]) and s["bytes_moved"] is None
    assert s["goals"] == {"max_over_steady_p99_le_1_1": None, "bytes_moved_0": None, "state_ge_500mb": False}


def test_the_operator_declares_its_windows_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import bench.padded_windows as pw
    monkeypatch.setenv(pw.WINDOW_ENV, "30000")
    spec = importlib.reload(pw).PaddedWindows.ballast_query
    monkeypatch.undo()
    importlib.reload(pw)  # the default again for later tests in this process
    assert spec.window is not None and spec.window.length_ms == 30_000 and spec.window.kind == "tumbling"
    assert spec.time_mode == "EventTime" and spec.event_time_column == "ts"


def test_the_staggered_operator_shifts_each_keys_windows_by_its_own_phase() -> None:
    from bench.padded_windows import StaggeredWindows, stagger_phase, window_start

    spec = StaggeredWindows.ballast_query.window
    assert spec is not None and spec.staggered and spec.kind == "tumbling"
    phases = {stagger_phase(f"k{i:09d}", 120_000) for i in range(1000)}
    assert all(0 <= p < 120_000 for p in phases) and len(phases) > 990, "closes spread over the window"
    assert stagger_phase("k000000007", 120_000) == stagger_phase("k000000007", 120_000)
    for ms, phase in ((0, 0), (119_999, 0), (5_000, 7_000), (127_000, 7_000), (1_000_000, 119_999)):
        start = window_start(ms, phase, 120_000)
        assert start <= ms < start + 120_000 and (start - phase) % 120_000 == 0
