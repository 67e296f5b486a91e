"""Each guard on its own, plus the state round-trip the DAG relies on."""

from __future__ import annotations

import json

import pytest

from ballast.policy.guards import GuardConfig, GuardState, GuardVerdict, Observation, evaluate_guards, record_change

pytestmark = pytest.mark.controlplane

# a config with every guard disarmed; each test arms one
OPEN = GuardConfig(
    min_workers=1, max_workers=100, warmup_s=0, warmup_epochs=0, activation=1,
    utilization_band=-1.0, scale_down_delay_s=0, ineffective_threshold=0.0,
)


def obs(t: float, cur: int, raw: int, util: float | None = None, rate: float | None = None, epoch: int | None = None):
    return Observation(now_s=t, epoch=int(t) if epoch is None else epoch, current_workers=cur,
                       proposed_workers=raw, utilization=util, true_rate=rate)


def test_open_guards_pass_ds2_through_and_decision_is_complete() -> None:
    d, _ = evaluate_guards(obs(0, 4, 6), GuardState(), OPEN)
    assert (d.action, d.target_workers, d.proposed_workers, d.current_workers) == ("scale_up", 6, 6, 4)
    assert "scale up 4->6" in d.reason and d.inputs["proposed_workers"] == 6
    d, _ = evaluate_guards(obs(0, 4, 4), GuardState(), OPEN)
    assert d.action == "no_change" and d.target_workers == 4 and "current worker count" in d.reason
    assert set(GuardVerdict.__dataclass_fields__) == {
        "current_workers", "proposed_workers", "target_workers", "action", "reason", "inputs"}


def test_state_round_trips_through_json() -> None:
    cfg = GuardConfig(activation=3, warmup_s=0, warmup_epochs=0, utilization_band=-1)
    s = GuardState()
    for t in (0, 10):
        _, s = evaluate_guards(obs(t, 4, 8), s, cfg)
    restored = GuardState.from_dict(json.loads(json.dumps(s.to_dict())))
    assert restored == s and restored.history == [8, 8]
    assert GuardState.from_dict(None) == GuardState()
    d, _ = evaluate_guards(obs(20, 4, 8), restored, cfg)  # third agreeing decision survives the trip
    assert d.action == "scale_up"


def test_warmup_ignores_decisions_after_a_change_by_time_and_by_epochs() -> None:
    cfg = GuardConfig(**{**OPEN.__dict__, "warmup_s": 60, "warmup_epochs": 3})
    s = record_change(GuardState(), at_s=1000, epoch=10, from_workers=2, to_workers=4, true_rate=None)
    d, _ = evaluate_guards(obs(1030, 4, 8, epoch=20), s, cfg)
    assert d.action == "no_change" and "warm-up" in d.reason
    d, _ = evaluate_guards(obs(1100, 4, 8, epoch=12), s, cfg)  # time passed, epochs did not
    assert d.action == "no_change" and "warm-up" in d.reason
    d, s2 = evaluate_guards(obs(1100, 4, 8, epoch=13), s, cfg)
    assert d.action == "scale_up" and s2.last_change_at == 1100  # acting restarts warm-up


def test_activation_needs_n_agreeing_decisions_and_aggregates_max_or_median() -> None:
    for agg, want in (("max", 9), ("median", 7)):
        cfg = GuardConfig(**{**OPEN.__dict__, "activation": 3, "activation_aggregate": agg})
        s = GuardState()
        d, s = evaluate_guards(obs(0, 4, 7), s, cfg)
        assert d.action == "no_change" and "activation 1/3" in d.reason
        d, s = evaluate_guards(obs(1, 4, 9), s, cfg)
        assert d.action == "no_change"
        d, s = evaluate_guards(obs(2, 4, 6), s, cfg)
        assert (d.action, d.target_workers) == ("scale_up", want)
    # a decision in the other direction resets the count
    cfg = GuardConfig(**{**OPEN.__dict__, "activation": 2})
    s = GuardState()
    _, s = evaluate_guards(obs(0, 4, 6), s, cfg)
    _, s = evaluate_guards(obs(1, 4, 3), s, cfg)
    d, s = evaluate_guards(obs(2, 4, 6), s, cfg)
    assert d.action == "no_change" and "activation 1/2" in d.reason


def test_utilization_band_suppresses_changes_inside_it() -> None:
    cfg = GuardConfig(**{**OPEN.__dict__, "target_utilization": 0.7, "utilization_band": 0.1})
    d, _ = evaluate_guards(obs(0, 4, 5, util=0.78), GuardState(), cfg)
    assert d.action == "no_change" and "within 0.70±0.10" in d.reason
    d, _ = evaluate_guards(obs(0, 4, 5, util=0.85), GuardState(), cfg)
    assert d.action == "scale_up" and d.target_workers == 5


def test_delayed_scale_down_waits_and_uses_highest_lower_target() -> None:
    cfg = GuardConfig(**{**OPEN.__dict__, "scale_down_delay_s": 300})
    s = GuardState()
    d, s = evaluate_guards(obs(0, 8, 4), s, cfg)
    assert d.action == "no_change" and "pending" in d.reason
    d, s = evaluate_guards(obs(200, 8, 6), s, cfg)
    assert d.action == "no_change"
    d, s = evaluate_guards(obs(300, 8, 5), s, cfg)
    assert (d.action, d.target_workers) == ("scale_down", 6)  # max of 4, 6, 5
    # an interruption (DS2 back at the current count) restarts the clock
    s = GuardState()
    _, s = evaluate_guards(obs(0, 8, 4), s, cfg)
    _, s = evaluate_guards(obs(100, 8, 8), s, cfg)
    d, s = evaluate_guards(obs(350, 8, 4), s, cfg)
    assert d.action == "no_change" and s.down_since == 350


def test_scale_up_is_immediate_while_scale_down_is_delayed() -> None:
    cfg = GuardConfig(**{**OPEN.__dict__, "scale_down_delay_s": 300})
    d, _ = evaluate_guards(obs(0, 8, 12), GuardState(), cfg)
    assert d.action == "scale_up"


def test_ineffective_scale_up_blocks_further_scale_ups() -> None:
    cfg = GuardConfig(**{**OPEN.__dict__, "warmup_s": 60, "ineffective_threshold": 0.1})
    s = GuardState()
    d, s = evaluate_guards(obs(0, 4, 8, rate=4000), s, cfg)  # 1000/s per instance
    assert d.action == "scale_up"
    # after warm-up, 8 workers only reach 4200/s: +200 over 4 added = 5 % of an instance
    d, s = evaluate_guards(obs(100, 8, 12, rate=4200), s, cfg)
    assert d.action == "no_change" and "blocked" in d.reason and "5%" in d.reason
    assert d.inputs["scale_up_gain_per_added_instance"] == pytest.approx(0.05)
    d, s = evaluate_guards(obs(200, 8, 12, rate=4200), s, cfg)
    assert d.action == "no_change" and s.scale_up_blocked
    # an effective scale-up does not block
    s = GuardState()
    _, s = evaluate_guards(obs(0, 4, 8, rate=4000), s, cfg)
    d, s = evaluate_guards(obs(100, 8, 12, rate=7600), s, cfg)
    assert d.action == "scale_up" and not s.scale_up_blocked
    # a scale-down clears the block
    blocked = GuardState(scale_up_blocked=True, blocked_reason="x")
    assert not record_change(blocked, 0, 0, 8, 4, None).scale_up_blocked


def test_min_max_workers_bound_the_target() -> None:
    cfg = GuardConfig(**{**OPEN.__dict__, "min_workers": 2, "max_workers": 10})
    d, _ = evaluate_guards(obs(0, 4, 50), GuardState(), cfg)
    assert d.target_workers == 10 and d.inputs["clamped_workers"] == 10
    d, _ = evaluate_guards(obs(0, 4, 1), GuardState(), cfg)
    assert d.target_workers == 2
    d, _ = evaluate_guards(obs(0, 10, 60), GuardState(), cfg)
    assert d.action == "no_change" and "bounded to 10" in d.reason
    d, _ = evaluate_guards(obs(0, 12, 12), GuardState(), cfg)
    assert (d.action, d.target_workers) == ("scale_down", 10)
    with pytest.raises(ValueError):
        GuardConfig(min_workers=5, max_workers=4)


def test_input_state_is_not_mutated() -> None:
    s = GuardState()
    evaluate_guards(obs(0, 4, 8), s, GuardConfig(activation=2, warmup_s=0, warmup_epochs=0, utilization_band=-1))
    assert s == GuardState()
