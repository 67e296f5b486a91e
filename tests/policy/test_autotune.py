"""Autotuning the settings: the cheapest interval that meets the latency goal, the keep-up bound, a
goal out of reach said so, the guards (threshold, hold, one bounded step), the records per epoch,
and convergence in a few decisions when the load steps up and down (on the model itself)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ballast.policy.autotune import TuneConfig, TuneInputs, advise, back_to_back_s, predicted_p99_ms, slow_epoch_factor

pytestmark = pytest.mark.controlplane

CFG = TuneConfig(latency_goal_ms=5_000, margin=0.2, min_trigger_ms=100, max_trigger_ms=60_000, hold_s=60)


def _inputs(rate: float = 2_000, trigger_ms: int = 500, o: float = 0.4, c: float = 100e-6) -> TuneInputs:
    return TuneInputs(rate_rows_s=rate, overhead_s=o, per_row_s=c, trigger_ms=trigger_ms, max_records_per_epoch=None)


def _cost_per_event(interval_s: float, inp: TuneInputs) -> float:
    return inp.overhead_s / (inp.rate_rows_s * interval_s) + inp.per_row_s


def test_the_model_is_continuous_at_the_keep_up_bound_and_grows_past_it() -> None:
    inp = _inputs()
    bound = back_to_back_s(inp)
    assert bound == pytest.approx(0.4 / 0.8)
    assert predicted_p99_ms(bound, inp) == pytest.approx(predicted_p99_ms(bound * (1 + 1e-9), inp), rel=1e-6)
    assert predicted_p99_ms(0, inp) == predicted_p99_ms(bound / 2, inp) == pytest.approx(2000 * bound)
    assert predicted_p99_ms(2 * bound, inp) > predicted_p99_ms(bound, inp)


def test_a_short_interval_is_lengthened_to_the_cheapest_one_that_meets_the_goal() -> None:
    inp = _inputs(trigger_ms=1_000)
    a = advise(inp, dataclasses.replace(CFG, max_factor=100), now_s=1_000, last_change_s=None)
    assert a.feasible and a.change and a.trigger_ms > 1_000
    goal_ms = CFG.latency_goal_ms * (1 - CFG.margin)
    assert a.predicted_p99_ms <= goal_ms + 15, "meets the goal (less the margin; 10 ms rounding)"
    longer = dataclasses.replace(inp, trigger_ms=a.trigger_ms)
    assert predicted_p99_ms(a.trigger_ms / 1000 * 1.1, longer) > goal_ms, "a longer interval would miss it"
    assert _cost_per_event(a.trigger_ms / 1000, inp) < _cost_per_event(1.0, inp), "and it is cheaper per event"
    assert "predicts p99" in a.reason


def test_more_load_shortens_the_interval_and_the_cap_drains_a_backlog_within_the_goal() -> None:
    light = advise(_inputs(rate=500, trigger_ms=3_000), CFG, 1_000, None)
    heavy = advise(_inputs(rate=5_000, trigger_ms=3_000), CFG, 1_000, None)
    assert heavy.trigger_ms < light.trigger_ms
    for a, rate in ((light, 500), (heavy, 5_000)):
        assert a.max_records_per_epoch >= 1.5 * rate * a.trigger_ms / 1000, "a backlog drains"
        assert 0.4 + 100e-6 * a.max_records_per_epoch <= CFG.latency_goal_ms / 1000, "a capped epoch fits the goal"


def test_a_goal_out_of_reach_is_said_so_and_the_interval_goes_to_the_keep_up_bound() -> None:
    inp = _inputs(rate=7_000, trigger_ms=5_000)  # c·λ = 0.7: back to back 1.33 s, p99 2.7 s > 2 s
    a = advise(inp, dataclasses.replace(CFG, latency_goal_ms=2_000), 1_000, None)
    assert not a.feasible and "out of reach" in a.reason and "DS2" in a.reason
    assert a.trigger_ms == math.ceil(back_to_back_s(inp) * 100) * 10 and a.change


def test_the_tail_is_the_slowest_epoch_over_the_median_within_bounds() -> None:
    assert slow_epoch_factor([400, 400, 400]) == 1.0
    assert slow_epoch_factor([400, 300, 600, 800, 400]) == pytest.approx(2.0)
    assert slow_epoch_factor([300, 300, 300, 3_000]) == 3.0, "one outlier does not set the interval alone"
    assert slow_epoch_factor([400, 900]) == 1.0, "too few epochs to say"
    assert slow_epoch_factor([0, 0, 400, 400, 600]) == pytest.approx(1.5), "epochs without a duration are not counted"


def test_a_tail_of_slow_epochs_shortens_the_interval_and_its_prediction_counts_them() -> None:
    """Epochs that sometimes last 1.5x the mean: the interval that meets the goal is shorter, and the
    model, continuous at the keep-up bound, predicts p99 with the slow epoch in it."""
    even = _inputs(trigger_ms=1_000)
    tailed = dataclasses.replace(even, slow_epoch_factor=1.5)
    bound = back_to_back_s(tailed)
    assert predicted_p99_ms(bound, tailed) == pytest.approx(predicted_p99_ms(bound * (1 + 1e-9), tailed), rel=1e-6)
    assert predicted_p99_ms(2.0, tailed) == pytest.approx(1000 * (2.0 + 1.5 * (0.4 + 100e-6 * 2_000 * 2.0)))
    wide = dataclasses.replace(CFG, max_factor=100)
    a, b = advise(even, wide, 1_000, None), advise(tailed, wide, 1_000, None)
    assert b.trigger_ms < a.trigger_ms and b.predicted_p99_ms <= CFG.latency_goal_ms * (1 - CFG.margin) + 15
    assert "slowest epoch 1.50× the median" in b.reason and "slowest epoch" not in a.reason


def test_workers_that_cannot_keep_up_change_nothing() -> None:
    a = advise(_inputs(rate=20_000), CFG, 1_000, None)
    assert not a.change and not a.feasible and math.isinf(a.predicted_p99_ms) and "cannot keep up" in a.reason


def test_the_guards_keep_small_changes_hold_after_a_change_and_bound_one_step() -> None:
    inp = _inputs(trigger_ms=2_000)
    best = advise(inp, dataclasses.replace(CFG, max_factor=100), 1_000, None)
    near = advise(dataclasses.replace(inp, trigger_ms=int(best.trigger_ms * 0.9)), CFG, 1_000, None)
    assert not near.change and "below the 20% threshold" in near.reason
    held = advise(inp, CFG, now_s=1_000, last_change_s=970)
    assert not held.change and "held" in held.reason
    # a load step up within the hold: the interval in force now misses the goal itself, so it is
    # shortened at once; lengthening it (cheaper, not urgent) still waits
    long = dataclasses.replace(_inputs(rate=4_000), trigger_ms=5_000)
    assert predicted_p99_ms(5.0, long) > CFG.latency_goal_ms
    urgent = advise(long, CFG, now_s=1_000, last_change_s=970)
    assert urgent.change and urgent.trigger_ms < 5_000 and "not held" in urgent.reason
    calm = advise(dataclasses.replace(long, rate_rows_s=100, trigger_ms=1_000), CFG, now_s=1_000, last_change_s=970)
    assert not calm.change and "held" in calm.reason
    one_step = advise(_inputs(trigger_ms=100, o=0.05), CFG, 1_000, None)
    assert one_step.trigger_ms == 400 and one_step.change, "at most x4 in one decision"
    bound = advise(_inputs(trigger_ms=100, o=0.4), CFG, 1_000, None)
    assert bound.trigger_ms == 500, "the keep-up bound (500 ms) wins over the step limit: below it is no faster"


@pytest.mark.parametrize("rates", [(500, 6_000, 500), (4_000, 300, 4_000)])
def test_a_load_that_steps_up_and_down_converges_within_five_decisions_per_change(rates) -> None:
    """The tuner drives a system that behaves as the model says; after each load change it settles
    (no further change) within 5 decisions, each after the hold time."""
    trigger, now = 500, 0.0
    for rate in rates:
        decisions = 0
        while True:
            inp = _inputs(rate=rate, trigger_ms=trigger)
            a = advise(inp, CFG, now, now - CFG.hold_s)
            if not a.change:
                break
            decisions += 1
            trigger, now = a.trigger_ms, now + CFG.hold_s
            assert decisions <= 5, f"no convergence at {rate} rows/s: {a.reason}"
        assert a.predicted_p99_ms <= CFG.latency_goal_ms, a.reason
