"""ballast.deadlines: a plan's deadline from its prediction, steps and gap (ms), and the refusal
of a plan that cannot fit, with a message that says what to change."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ballast.deadlines import DeadlineTooLong, check_fits, for_plan, plan_deadline


@dataclass(frozen=True)
class Rb:  # the three settings of a job's `rebalance:` section the deadline reads
    await_timeout_s: float = 60.0
    batch_budget_s: float = 1.0
    poll_interval_s: float = 2.0


def test_formula_in_ms():
    # 4 steps, 10 s gap: the model's 40 s total holds 3 gaps (30 s), so 10 s of work
    d = plan_deadline(predicted_ms=40_000, steps=4, gap_ms=10_000, margin_ms=60_000, per_step_ms=4_000)
    assert (d.work_ms, d.gaps_ms, d.slack_ms, d.margin_ms) == (10_000, 40_000, 16_000, 60_000)
    assert d.total_ms == 126_000


def test_no_gap_and_one_step():
    d = plan_deadline(predicted_ms=1_500, steps=1, gap_ms=0, margin_ms=5_000, per_step_ms=4_000)
    assert d.total_ms == 1_500 + 4_000 + 5_000


def test_grows_with_steps_and_gap():
    base = plan_deadline(10_000, 2, 1_000, 0, 0).total_ms
    assert plan_deadline(10_000, 2, 5_000, 0, 0).total_ms > base  # a longer gap: later deadline
    assert plan_deadline(12_000, 3, 1_000, 0, 0).total_ms > base  # one more step (and its epoch)


def test_missing_prediction_counts_as_no_work():
    assert plan_deadline(None, 2, 0, 1_000, 500).total_ms == 2_000


def test_negative_input_is_an_error():
    with pytest.raises(ValueError, match=">= 0"):
        plan_deadline(1_000, 2, -1, 0, 0)


def test_for_plan_reads_gap_and_job_settings():
    d = for_plan(predicted_ms=3_000, steps=3, params={"gap_seconds": 2.0}, rebalance=Rb())
    # work 3000 - 2 gaps * 2000 -> 0; gaps 3 * 2000; slack 3 * (2 * 1000 + 2000); margin 60 s
    assert (d.work_ms, d.gaps_ms, d.slack_ms, d.margin_ms) == (0, 6_000, 12_000, 60_000)


def test_check_fits_accepts_a_plan_within_the_limit():
    check_fits(plan_deadline(10_000, 2, 1_000, 1_000, 0), 2, max_ms=13_000, limit_name="the test")


def test_check_fits_refuses_and_says_which_gap_would_fit():
    d = plan_deadline(predicted_ms=7 * 3_600_000 + 8_000, steps=8, gap_ms=3_600_000, margin_ms=600_000,
                      per_step_ms=4_000)
    with pytest.raises(DeadlineTooLong) as err:
        check_fits(d, 8, max_ms=5 * 3_600_000, limit_name="ballast_migrate allows")
    msg = str(err.value)
    # (5 h - 8 s work - 32 s slack - 600 s margin) / 8 steps = 2170 s
    assert "lower gap_seconds to at most 2170 s" in msg and "ballast_migrate allows" in msg
    assert "fewer steps" in msg
    room = plan_deadline(7 * 2_170_000 + 8_000, 8, 2_170_000, 600_000, 4_000)
    check_fits(room, 8, max_ms=5 * 3_600_000, limit_name="x")  # the advised gap fits
