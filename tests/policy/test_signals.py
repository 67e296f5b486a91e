"""ballast.policy.signals: when a job wakes its rebalance DAG instead of waiting for the schedule."""

import pytest

from ballast.policy.signals import BUSY, GROWING, IDLE, EpochLoad, SignalConfig, Signaller, crossing

CFG = SignalConfig(epochs=3, hold_s=60, idle_hold_s=600, busy_low=0.5, busy_high=0.9, budget_ms=1000,
                   min_workers=1, max_workers=4)


def loads(backlogs, batch_ms=700.0, workers=2, first=1):
    return [EpochLoad(first + i, b, batch_ms, workers) for i, b in enumerate(backlogs)]


def test_backlog_growing_for_n_epochs_in_a_row():
    s = crossing(loads([100, 200, 300, 400]), CFG)
    assert s is not None and s.reason == GROWING and s.epoch == 4 and s.backlog == 400
    assert "100 -> 400" in s.detail
    assert crossing(loads([100, 200, 300]), CFG) is None  # only 2 increases
    assert crossing(loads([100, 200, 200, 400]), CFG) is None  # not strictly growing
    assert crossing(loads([100, 200, 300, 400], workers=4), CFG) is None  # at the ceiling: nothing to gain


def test_busy_and_idle_need_every_epoch_of_the_window_outside_the_band():
    assert crossing(loads([0, 0, 0], batch_ms=950), CFG).reason == BUSY  # type: ignore[union-attr]
    assert crossing([*loads([0, 0], batch_ms=950), *loads([0], batch_ms=850, first=3)], CFG) is None
    idle = crossing(loads([0, 0, 0], batch_ms=100), CFG)
    assert idle is not None and idle.reason == IDLE and idle.busy == pytest.approx(0.1)
    assert crossing(loads([0, 0, 5], batch_ms=100), CFG) is None  # a backlog: not idle
    assert crossing(loads([0, 0, 0], batch_ms=100, workers=1), CFG) is None  # at the floor
    assert crossing(loads([0, 0, 0], batch_ms=700), CFG) is None  # inside the band


def test_signaller_holds_back_repeats_and_restarts_on_replay():
    sig = Signaller(CFG)
    out = [sig.observe(e, now_s=float(i)) for i, e in enumerate(loads([10, 20, 30, 40, 50, 60]))]
    assert [o.reason if o else None for o in out] == [None, None, None, GROWING, None, None]  # held 60 s
    assert sig.observe(EpochLoad(7, 70, 700, 2), now_s=100.0).reason == GROWING  # type: ignore[union-attr]
    # a replayed epoch (a restarted driver re-runs it): the window starts over
    assert sig.observe(EpochLoad(5, 80, 700, 2), now_s=200.0) is None
    assert sig.observe(EpochLoad(6, 90, 700, 2), now_s=201.0) is None


def test_idle_signals_are_held_for_the_scale_down_delay():
    sig = Signaller(CFG)
    raised = [sig.observe(e, now_s=30.0 * i) for i, e in enumerate(loads([0] * 30, batch_ms=100))]
    at = [i for i, o in enumerate(raised) if o]
    assert at == [2, 22]  # the first after 3 epochs, the next 600 s later


def test_no_signals_when_off_and_bad_thresholds_are_refused():
    assert Signaller(SignalConfig(epochs=0)).observe(EpochLoad(1, 5, 5000, 2), 0.0) is None
    with pytest.raises(ValueError, match="busy_low"):
        SignalConfig(busy_low=0.9, busy_high=0.5)
    with pytest.raises(ValueError, match="bad signal thresholds"):
        SignalConfig(budget_ms=0)
