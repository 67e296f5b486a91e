"""ballast.console_plans: the cost model's accuracy over recent plans is the median of measured ÷
predicted per quantity, over the plans that have both figures. Fast: no services. (The plan rows
themselves are read through the console's API in test_console.py.)"""

from __future__ import annotations

import pytest

from ballast import console_plans

pytestmark = pytest.mark.controlplane


def test_prediction_accuracy_medians():
    rows = [{"pause_predicted_ms": 10.0, "pause_measured_ms": m_, "duration_predicted_ms": None,
             "duration_measured_ms": 5.0} for m_ in (5.0, 10.0, 30.0, None)]
    acc = console_plans.prediction_accuracy(rows)
    assert acc["pause"] == {"plans": 3, "median_ratio": 1.0, "median_abs_error": 0.5}  # ratios 0.5, 1, 3
    assert acc["duration"] == {"plans": 0, "median_ratio": None, "median_abs_error": None}
    rows.pop()
    rows.pop(1)  # ratios 0.5 and 3: an even count averages the middle two
    assert console_plans.prediction_accuracy(rows)["pause"]["median_ratio"] == pytest.approx(1.75)
