"""bench.driver_startup: the summary's medians per side and its with ÷ without ratios."""

from __future__ import annotations

import pytest

from bench.driver_startup import summary

pytestmark = pytest.mark.bench


def test_summary_is_medians_per_side_and_their_ratio() -> None:
    runs = [{"archive": True, "wall_s": 10.0, "jvm_cpu_s": 9.0}, {"archive": False, "wall_s": 20.0, "jvm_cpu_s": 18.0},
            {"archive": False, "wall_s": 16.0, "jvm_cpu_s": 17.0}, {"archive": True, "wall_s": 12.0, "jvm_cpu_s": 8.0},
            {"archive": True, "wall_s": 30.0, "jvm_cpu_s": 10.0}, {"archive": False, "wall_s": 18.0, "jvm_cpu_s": 19.0}]
    s = summary(runs)
    assert s["drivers"] == 6
    assert s["wall_s"] == {"with": 12.0, "without": 18.0, "ratio": 0.667}
    assert s["jvm_cpu_s"] == {"with": 9.0, "without": 18.0, "ratio": 0.5}
