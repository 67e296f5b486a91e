"""bench.experiments.nexmark_cost: a query's ratio is the median of its paired rounds' own ratios
(each round's native and Ballast runs meet the machine's drift together), not a ratio of medians;
a round a side could not time does not count. No services."""

from __future__ import annotations

import math

import pytest

from bench.experiments.nexmark_cost import combine_rounds

pytestmark = pytest.mark.bench


def _side(ms: float, tag: str) -> dict:
    return {"ms_per_event": ms, "tag": tag}


def test_the_ratio_is_the_median_of_the_rounds_own_ratios() -> None:
    runs = [(_side(1.0, "b0"), _side(1.0, "n0")), (_side(2.0, "b1"), _side(1.0, "n1")),
            (_side(3.0, "b2"), _side(4.0, "n2"))]
    c = combine_rounds(runs)
    assert c["ratios"] == [1.0, 2.0, 0.75]
    assert c["ratio"] == 1.0  # the medians' ratio would be 2.0 / 1.0
    assert (c["ballast_ms_per_event"], c["native_ms_per_event"]) == (2.0, 1.0)
    assert (c["ballast"]["tag"], c["native"]["tag"]) == ("b0", "n0"), "the median round's details"
    assert c["native_error"] is None


def test_a_round_without_a_native_time_does_not_count() -> None:
    runs = [(_side(1.0, "b0"), {"ms_per_event": math.nan, "error": "no batch read input"}),
            (_side(1.5, "b1"), _side(1.0, "n1"))]
    c = combine_rounds(runs)
    assert math.isnan(c["ratios"][0]) and c["ratio"] == 1.5
    assert c["native_ms_per_event"] == 1.0 and c["ballast_ms_per_event"] == 1.25
    assert c["native_error"] == "no batch read input" and c["ballast"]["tag"] == "b1"


def test_one_round_is_that_round() -> None:
    c = combine_rounds([(_side(0.9, "b"), _side(1.2, "n"))])
    assert c["ratio"] == pytest.approx(0.75) and c["ratios"] == [pytest.approx(0.75)]
