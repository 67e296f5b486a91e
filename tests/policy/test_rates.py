"""ballast.policy.rates: DS2's measurement. True rates count only useful time (summed over instances,
or the busiest instance's for `max`), over every epoch of the window, and an operator without
useful time has no rate; the source's load is its mean arrival rate and latest backlog; the first
operator's records per source row and the fixed per-batch overhead are measured from the window,
robust to one slow batch."""

from __future__ import annotations

import pytest

from ballast.policy.dataflow import Dataflow, EpochMetrics, WorkerEpochMetrics
from ballast.policy.rates import DEFAULT_OVERHEAD_S, estimate_overhead_s, operator_rates, source_expansion, source_load

pytestmark = pytest.mark.controlplane


def row(op: str, w: int, rin: int, rout: int, useful_ms: float, wall_ms: float = 60_000, epoch: int = 0):
    return WorkerEpochMetrics(op, epoch, w, rin, rout, useful_ms, wall_ms)


def test_true_rates_sum_and_max_aggregation() -> None:
    # two instances, skewed: w0 did 600 rows in 1 s of useful time, w1 300 rows in 1 s
    rows = [row("agg", 0, 600, 60, 1000, 2000), row("agg", 1, 300, 30, 1000, 2000)]
    s = operator_rates(rows, "sum")["agg"]
    assert s.true_rate == pytest.approx(900.0)
    assert s.true_rate_per_instance == pytest.approx(450.0)
    assert s.selectivity == pytest.approx(0.1)
    assert s.observed_rate == pytest.approx(450.0)  # 900 rows / 2 s wall: observed < true
    # busy time differs: w0 useful 2 s, w1 0.5 s; MAX charges everyone the busiest time
    rows = [row("agg", 0, 600, 60, 2000), row("agg", 1, 300, 30, 500)]
    assert operator_rates(rows, "sum")["agg"].true_rate == pytest.approx(300 + 600)
    m = operator_rates(rows, "max")["agg"]
    assert m.true_rate == pytest.approx(900 / 2.0)
    assert m.true_rate_per_instance == pytest.approx(225.0)


def test_rates_aggregate_over_a_window_of_epochs_and_skip_unmeasured() -> None:
    rows = [row("op", 0, 100, 100, 100, epoch=e) for e in range(5)] + [row("idle", 0, 0, 0, 0)]
    r = operator_rates(rows)
    assert r["op"].true_rate == pytest.approx(500 / 0.5)
    assert "idle" not in r  # DS2: rates undefined when useful time is 0
    with pytest.raises(ValueError):
        operator_rates(rows, "avg")  # type: ignore[arg-type]


def test_source_load_and_catch_up_target() -> None:
    eps = [EpochMetrics(e, 100, 500, rate, backlog) for e, rate, backlog in [(1, 900, 50), (2, 1100, 3000)]]
    src = source_load(eps)
    assert src.rate == pytest.approx(1000) and src.backlog == 3000
    assert src.target_rate(catch_up_s=60) == pytest.approx(1000 + 50)


def test_estimate_overhead_from_batches() -> None:
    eps = [EpochMetrics(e, 10, ms, 1, 0) for e, ms in [(0, 1300), (1, 1250), (2, 5000)]]
    rows = [WorkerEpochMetrics("a", e, w, 1, 1, 400, 500 + 100 * w) for e in range(3) for w in range(2)]
    rows += [WorkerEpochMetrics("b", e, 0, 1, 1, 400, 500) for e in range(3)]
    # Σ stage max wall = 0.6 + 0.5 = 1.1 s; overheads 0.2, 0.15, 3.9 → median 0.2 (GC outlier ignored)
    assert estimate_overhead_s(eps, rows) == pytest.approx(0.2)
    assert estimate_overhead_s([], rows) == pytest.approx(0.25)



def test_an_instance_without_useful_time_counts_in_p_but_adds_no_rate() -> None:
    rows = [row("op", 0, 1000, 500, 1000, 2000), row("op", 1, 0, 0, 0, 2000)]
    r = operator_rates(rows)["op"]
    assert r.instances == 2 and r.true_rate == pytest.approx(1000.0)
    assert r.true_rate_per_instance == pytest.approx(500.0)
    assert r.selectivity == pytest.approx(0.5) and r.observed_rate == pytest.approx(500.0)
    assert (r.useful_s, r.wall_s) == (pytest.approx(1.0), pytest.approx(4.0))
    assert operator_rates([]) == {}


def test_operators_are_measured_apart() -> None:
    rates = operator_rates([row("a", 0, 100, 200, 100), row("b", 0, 200, 20, 1000)])
    assert set(rates) == {"a", "b"}
    assert rates["a"].true_rate == pytest.approx(1000.0) and rates["a"].selectivity == pytest.approx(2.0)
    assert rates["b"].true_rate == pytest.approx(200.0) and rates["b"].true_output_rate == pytest.approx(20.0)


def test_no_epochs_is_an_error() -> None:
    with pytest.raises(ValueError, match="no epoch metrics"):
        source_load([])


def test_the_latest_epochs_backlog_counts_whatever_the_order() -> None:
    eps = [EpochMetrics(e, 100, 500, 100.0 * e, 10 * e) for e in (3, 1, 2)]
    src = source_load(eps)
    assert src.rate == pytest.approx(200.0) and src.backlog == 30


def test_source_expansion_is_records_per_source_row_measured_on_both_sides() -> None:
    flow = Dataflow.chain("src", [("split", 1), ("count", 1)])
    eps = [EpochMetrics(e, 100, 500, 100.0, 0) for e in (1, 2, 3)]
    rows = [row("split", w, 500, 5000, 10, epoch=e) for e in (1, 2) for w in (0, 1)]
    rows += [row("count", 0, 99_999, 1, 10, epoch=e) for e in (1, 2)]  # only the source's first operator counts
    rows += [row("split", 0, 7_000, 1, 10, epoch=9)]  # an epoch the source side did not measure
    assert source_expansion(flow, rows, eps, "src") == pytest.approx(10.0)  # 2 x 1000 records / 2 x 100 rows
    assert source_expansion(flow, [], eps, "src") == 1.0  # unmeasured: 1:1
    assert source_expansion(flow, [row("split", 0, 0, 0, 10, epoch=1)], eps, "src") == 1.0
    near = [row("split", 0, 1001, 1, 10, epoch=1)]  # a window edge: 0.1 % off is still 1:1
    assert source_expansion(flow, near, [EpochMetrics(1, 1000, 500, 1.0, 0)], "src") == 1.0


def test_overhead_is_the_median_batch_time_outside_the_stages() -> None:
    eps = [EpochMetrics(e, 10, ms, 1, 0) for e, ms in [(0, 1300), (1, 1400)]]
    rows = [WorkerEpochMetrics("a", e, 0, 1, 1, 400, 1000) for e in range(2)]
    assert estimate_overhead_s(eps, rows) == pytest.approx(0.35)  # even count: the mean of the middle two
    fast = [EpochMetrics(0, 10, 500, 1, 0)]
    assert estimate_overhead_s(fast, rows) == 0.0  # a batch shorter than its stages: no negative overhead
    assert estimate_overhead_s(eps, []) == DEFAULT_OVERHEAD_S
    assert estimate_overhead_s(eps, [], default=0.5) == 0.5
