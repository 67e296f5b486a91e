"""The `autotune` experiment's parts that need no broker or Spark (bench.experiments.autotune,
bench.slow_ops): the figures summary.json takes from the runs, the changes counted per load phase,
the CPU meter on real processes, and the slow operator's cost and answers."""

from __future__ import annotations

import math
import struct
import subprocess
import sys
import time

import psutil
import pytest

from bench import slow_ops
from bench.experiments import autotune as at

pytestmark = pytest.mark.bench

T = at.AutotuneProfile(goal_ms=3000.0)


def _run(i: int, fixed: int | None, p99: float, phases: list[float], cpu: float, per_phase: list[int] | None = None,
         ) -> dict[str, object]:
    return {"run": i, "label": f"at-{i}-{'tuned' if fixed is None else f'fixed{fixed}'}", "tuned": fixed is None,
            "job": f"j{i}", "trigger_ms": fixed or 500, "p50_ms": p99 / 2, "p99_ms": p99, "max_ms": p99 * 1.1,
            "n": 1000, "unanswered": 0, "phase_p99_ms": phases, "cpu_s": cpu, "cpu_ms_per_1k": cpu,
            "epochs": 50, "records": 28000, "final_trigger_ms": fixed or 1800, "changes": [],
            "changes_per_phase": per_phase or [0, 0, 0]}


RUNS = [_run(0, 300, 1900.0, [1000.0, 1900.0, 1000.0], 2400.0),
        _run(1, 1000, 2100.0, [1600.0, 2100.0, 1600.0], 2000.0),
        _run(2, None, 2600.0, [2500.0, 2600.0, 2450.0], 1700.0, [1, 2, 1]),
        _run(3, 1500, 2900.0, [2100.0, 2900.0, 2100.0], 1800.0),
        _run(4, 2500, 4300.0, [3300.0, 4300.0, 3300.0], 1500.0)]


def test_the_summary_compares_the_tuned_run_with_the_best_fixed_interval_three_ways() -> None:
    s = at.summarize(T, RUNS)
    # the lowest p99 of any fixed interval: 300 ms, bought with the most CPU
    assert s["best_fixed_ms"] == 300 and s["p99_over_best_fixed"] == pytest.approx(2600 / 1900)
    assert s["cost_over_best_fixed"] == pytest.approx(1700 / 2400)
    # at a matched budget: only the intervals that cost no less than the tuned run (1 800 is within 5 %)
    assert s["best_fixed_at_cost_ms"] == 300
    assert s["p99_over_best_fixed_at_cost"] == pytest.approx(2600 / 1900)
    # the goal at the least cost: 1 500 ms met 3 000 ms in every phase and is the cheapest that did
    assert s["cheapest_fixed_within_goal_ms"] == 1500
    assert s["cost_over_cheapest_fixed_within_goal"] == pytest.approx(1700 / 1800)
    assert s["tuned_meets_goal"] is True
    assert s["decisions_per_phase"] == [1, 2, 1] and s["decisions_to_converge_max"] == 2


def test_a_fixed_interval_cheaper_than_the_tuned_run_is_not_its_match_at_cost() -> None:
    runs = [RUNS[2], _run(5, 2500, 2000.0, [2000.0, 2000.0, 2000.0], 1000.0)]
    s = at.summarize(T, runs)
    assert s["best_fixed_at_cost_ms"] is None and math.isnan(s["p99_over_best_fixed_at_cost"])
    assert s["p99_over_best_fixed"] == pytest.approx(2600 / 2000)


def test_no_fixed_interval_within_the_goal_and_a_tuned_run_over_it_say_so() -> None:
    runs = [_run(0, 2500, 4300.0, [3300.0, 4300.0, 3300.0], 1500.0),
            _run(1, None, 3500.0, [2000.0, 3500.0, 2000.0], 1700.0, [1, 1, 1])]
    s = at.summarize(T, runs)
    assert s["cheapest_fixed_within_goal_ms"] is None and math.isnan(s["cost_over_cheapest_fixed_within_goal"])
    assert s["tuned_meets_goal"] is False
    text = at.readme(s)
    assert "met the goal in every phase: False" in text and "**tuned**" in text and "fixed 2500 ms" in text


def test_without_a_tuned_run_the_figures_are_missing_not_made_up() -> None:
    s = at.summarize(T, [RUNS[0], RUNS[1]])
    assert math.isnan(s["p99_over_best_fixed"]) and s["decisions_to_converge_max"] is None


def test_changes_are_counted_in_the_phase_they_were_emitted_in() -> None:
    assert at.changes_per_phase([1.0, 39.9, 40.0, 41.0, 85.0, 200.0, -3.0], 40.0, 3) == [3, 2, 2]


def test_the_cpu_meter_counts_a_descendant_that_ended_while_measured() -> None:
    # a parent that starts a child burning ~0.4 s of CPU, waits for it, then sleeps
    code = ("import subprocess,sys,time; subprocess.run([sys.executable,'-c',"
            "'import time\\nt=time.process_time()\\nwhile time.process_time()-t<0.4: pass']); time.sleep(30)")
    p = subprocess.Popen([sys.executable, "-c", code])
    try:
        m = at.CpuMeter()
        m.start(p.pid)
        parent = psutil.Process(p.pid)
        deadline = time.time() + 30  # the child started, then ended and was reaped (a loaded machine too)
        while not parent.children() and time.time() < deadline:
            time.sleep(0.02)
        while parent.children() and time.time() < deadline:
            time.sleep(0.1)
        used = m.stop()
    finally:
        p.kill()
        p.wait()
    assert 0.35 <= used < 1.5


def test_the_slow_operator_answers_as_key_count_and_spends_its_cpu_per_record() -> None:
    op = slow_ops.SlowKeyCount()
    t = time.process_time()
    state, outs = op.fold(b"k", struct.pack(">q", 5), [b"a"] * 200)
    spent = time.process_time() - t
    assert struct.unpack(">q", state)[0] == 205 and outs == [(b"k", b"205")]  # type: ignore[arg-type]
    assert spent >= 0.9 * 200 * slow_ops.ROW_US / 1e6
