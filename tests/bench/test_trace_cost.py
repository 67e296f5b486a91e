"""bench.trace_cost: the window it times has the data plane's shape (per epoch eight driver phases,
a job end, three spans per worker, a source-stage message per task and one task end), its CP sums
to 1, and the printed figure is the median time over the trigger interval."""

from __future__ import annotations

import json

import pytest

from ballast.tracing import epochs_participation
from bench import trace_cost

pytestmark = pytest.mark.bench


def test_the_window_has_the_data_planes_shape_and_a_whole_cp():
    trace = trace_cost.window_trace(window_s=5.0, trigger_ms=500, workers=3)
    assert len({a.epoch for a in trace.activities}) == 10
    assert len(trace.activities) == 10 * (8 + 3 * 3) and len(trace.messages) == 10 * (3 + 1)
    cp = epochs_participation(trace)
    assert sum(v for _, v in cp.edges) == pytest.approx(1.0)
    assert any(k.startswith("fold on worker") for k in cp.by("label")), "the last task's fold is critical"


def test_the_figure_is_the_median_cp_time_over_one_epoch(capsys):
    assert trace_cost.main(["--window-s", "2", "--trigger-ms", "250", "--workers", "2,4", "--reps", "3"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["workers"], r["epochs"]) for r in rows] == [(2, 8), (4, 8)]
    for r in rows:
        assert r["cp_ms"] > 0 and r["cp_ms_over_epoch_ms"] == pytest.approx(r["cp_ms"] / 250, abs=1e-4)
