"""ballast.policy.critical: the workers' share of the critical path, Amdahl's gain of a scale-up on
it, and the check that keeps W when that gain is below what a migration is worth (or says nothing
without a trace, for a scale-down, or when switched off)."""

from __future__ import annotations

import pytest

from ballast.policy.critical import (
    bin_weights,
    critical_path_check,
    folds_ms,
    folds_share,
    scale_up_gain,
    useful_time,
    workers_share,
)

pytestmark = pytest.mark.controlplane

OUTSIDE = {"source stage": 0.55, "job end on driver": 0.2, "fold on worker 0": 0.1, "fold on worker 1": 0.05,
           "read on worker 0": 0.05, "plan on driver": 0.05}
INSIDE = {"fold on worker 0": 0.5, "fold on worker 1": 0.3, "source stage": 0.2}


def test_the_workers_share_counts_their_timelines_only():
    assert workers_share(OUTSIDE) == pytest.approx(0.2)
    assert workers_share(INSIDE) == pytest.approx(0.8)
    assert workers_share({"fold on worker 12": 0.3, "fold on workers": 0.2, "worker 1": 0.1}) == pytest.approx(0.3)


def test_the_gain_is_amdahls_law_on_the_critical_path():
    assert scale_up_gain(INSIDE, 2, 4) == pytest.approx(0.8 * 0.5)  # the workers' 80 % halves
    assert scale_up_gain(OUTSIDE, 1, 2) == pytest.approx(0.1)
    assert scale_up_gain(INSIDE, 4, 2) == 0.0 and scale_up_gain(INSIDE, 3, 3) == 0.0


def test_a_scale_up_that_would_barely_shorten_epochs_is_held_and_says_where_the_time_goes():
    note = critical_path_check(OUTSIDE, 2, 3, min_gain=0.1)
    assert note is not None
    assert note.startswith("the workers hold only 20% of the critical path (source stage 55%, job end on driver 20%)")
    assert "2 -> 3 workers would shorten epochs by 7%, below the 10% worth a migration" in note
    assert critical_path_check(INSIDE, 2, 3, min_gain=0.1) is None, "the workers' 80 % shrinks by a third"
    assert critical_path_check(OUTSIDE, 2, 3, min_gain=0.0) is None, "off"
    assert critical_path_check({}, 2, 3, min_gain=0.1) is None, "no trace: DS2 alone decides"
    assert critical_path_check(OUTSIDE, 3, 2, min_gain=0.1) is None, "a scale-down is not this check's"


def test_bins_are_weighed_by_fold_time_only_when_the_folds_hold_the_critical_path():
    records = [100, 100, 100, 100]
    fold_us = [1_000, 1_000, 40_000, 1_000]  # bin 2: as many records, forty times the time
    w = bin_weights(records, fold_us, INSIDE, min_share=0.5)
    assert folds_share(INSIDE) == pytest.approx(0.8) and w.basis == "fold time"
    assert sum(w.load) == pytest.approx(400) and w.load[2] == pytest.approx(400 * 40 / 43), "in records' units"
    assert "hottest: bin 2 with 93% of the time and 25% of the records" in w.reason
    held = bin_weights(records, fold_us, OUTSIDE, min_share=0.5)
    assert held.basis == "records" and held.load == (100.0,) * 4
    assert "folds hold 15% of the critical path (< 50%)" in held.reason
    assert bin_weights(records, fold_us, {}, 0.5).basis == "records", "no trace"
    assert bin_weights(records, [0, 0, 0, 0], INSIDE, 0.5).basis == "records", "times not measured (old rows)"
    assert bin_weights(records, [5, 0, 5, 5], INSIDE, 0.5).basis == "records", "a bin with records but no time"
    assert bin_weights(records, fold_us, INSIDE, 1.5).basis == "records", "off"
    assert bin_weights(records, fold_us, OUTSIDE, 0.0).basis == "fold time", "0: whenever measured"


def test_folds_are_summed_per_epoch_and_worker_and_nothing_else_counts():
    acts = [(1, "driver", "plan", 0, 50_000), (1, "worker 0", "prepare", 60_000, 2_060_000),
            (1, "worker 0", "fold", 2_060_000, 2_810_000), (1, "worker 1", "fold", 60_000, 500_000),
            (1, "worker 1", "fold", 600_000, 700_000), (2, "worker 0", "fold", 0, 1_000),
            (2, "worker 10", "read", 0, 9)]
    assert folds_ms(acts) == {(1, 0): 750.0, (1, 1): 540.0, (2, 0): 1.0}


def test_useful_time_is_the_fold_when_the_traces_cover_every_busy_worker_epoch():
    counters = {(1, 0): 3750.0, (1, 1): 3750.0, (2, 0): 750.0, (2, 1): 0.0}  # (2, 1) idle: no task span needed
    folds = {(1, 0): 750.0, (1, 1): 750.0, (2, 0): 750.0}
    u = useful_time(counters, folds)
    assert u.basis == "trace" and u.ms == {(1, 0): 750.0, (1, 1): 750.0, (2, 0): 750.0, (2, 1): 0.0}
    assert "6.0 s of the counters' 8.2 s (73%) was bins brought up to date" in u.reason
    partial = useful_time(counters, {(1, 0): 750.0, (2, 0): 750.0})  # one busy worker epoch untraced
    assert partial.basis == "counters" and partial.ms == counters and "1 of 3 busy worker epochs" in partial.reason
    assert useful_time(counters, {}).basis == "counters"
    assert "no stored traces" in useful_time(counters, {}, traced=False).reason
    stateless = useful_time(counters, {}, traced=True)  # traces, but no worker folds in them
    assert stateless.basis == "counters" and "no fold" in stateless.reason
    assert "no stored traces" not in stateless.reason
    off = useful_time(counters, folds, enabled=False)
    assert off.basis == "counters" and off.ms == counters and "is off" in off.reason
