"""The `trace` experiment's pure parts (bench.experiments.trace_overhead): the overhead from per-run
stats (medians of the on- and off-runs, each pair's ratio, the off-runs' spread as the noise), the
CP-window timing on a synthetic trace stored in a migrated SQLite DB, and the README and summary
built from them (no Spark, no broker)."""

from __future__ import annotations

import math

import pytest

from ballast.store import traces, writer
from ballast.tracing import Message, Trace
from bench import trace_cost
from bench.experiments import trace_overhead as to

pytestmark = pytest.mark.bench


def _run(i: int, on: bool, p50: float, p99: float) -> dict[str, object]:
    return {"run": i, "label": f"trace-{i}-{'on' if on else 'off'}", "trace": on, "job": f"j{i}{on}",
            "p50_ms": p50, "p99_ms": p99, "max_ms": p99 * 1.2, "n": 1000, "unanswered": 0,
            "median_batch_ms": 300.0, "epochs": 80, "loadavg_1m": 1.0, "start_to_load_s": 0.5}


RUNS = [_run(1, True, 1100, 2000), _run(1, False, 1000, 1900), _run(2, True, 1050, 2200),
        _run(2, False, 1200, 2100), _run(3, True, 1300, 2100), _run(3, False, 1100, 2000)]


def test_a_runs_quantiles_are_exact_not_on_the_histograms_2_percent_staircase() -> None:
    lat = [1000.0 + i for i in range(101)]  # 1000 .. 1100 ms: the histogram would report ~1 % bins
    s = to.exact_stats(lat)
    assert s == {"n": 101, "p50_ms": 1050.0, "p99_ms": pytest.approx(1099.0), "max_ms": 1100.0}
    assert to.exact_stats([1000.0, 1010.0])["p50_ms"] == 1005.0  # between order statistics, not a bucket's midpoint
    assert math.isnan(to.exact_stats([])["p50_ms"])


def test_the_overhead_is_the_median_of_the_on_runs_over_the_median_of_the_off_runs() -> None:
    o = to.overhead(RUNS)
    assert (o["runs_on"], o["runs_off"]) == (3, 3)
    assert (o["on_p50_ms"], o["off_p50_ms"]) == (1100, 1100) and o["overhead_p50"] == pytest.approx(0.0)
    assert o["overhead_p99"] == pytest.approx(2100 / 2000 - 1)
    assert o["pair_overheads_p50"] == pytest.approx([0.1, 1050 / 1200 - 1, 1300 / 1100 - 1])
    assert o["off_p50_spread"] == pytest.approx((1200 - 1000) / 1100)
    assert o["off_p99_spread"] == pytest.approx((2100 - 1900) / 2000)
    assert o["on_p50_spread"] == pytest.approx((1300 - 1050) / 1100)
    assert o["p50_inside_noise"] and o["p99_inside_noise"]  # 5 % against a 10 % spread
    pairs = [0.1, 1050 / 1200 - 1, 1300 / 1100 - 1]
    assert o["paired_overhead_p50"] == pytest.approx(0.1) and o["paired_mean_p50"] == pytest.approx(sum(pairs) / 3)
    mean = sum(pairs) / 3
    se = math.sqrt(sum((v - mean) ** 2 for v in pairs) / 2) / math.sqrt(3)
    assert o["paired_se_p50"] == pytest.approx(se)


def test_an_overhead_larger_than_the_off_runs_spread_is_outside_the_noise() -> None:
    runs = [_run(1, True, 1500, 3000), _run(1, False, 1000, 2000), _run(2, True, 1520, 3100),
            _run(2, False, 1010, 2010)]
    o = to.overhead(runs)
    assert o["overhead_p50"] == pytest.approx(1510 / 1005 - 1) and not o["p50_inside_noise"]
    one = to.overhead(runs[:2])  # one off-run: no spread, so no claim either way
    assert math.isnan(one["off_p50_spread"]) and not one["p50_inside_noise"]
    # an on-run far off its twin (a job that fell behind) widens the noise: no longer outside it
    wide = to.overhead([*runs, _run(3, True, 4000, 9000), _run(3, False, 1005, 2005)])
    assert wide["overhead_p50"] == pytest.approx(1520 / 1005 - 1) and wide["p50_inside_noise"]
    assert math.isnan(one["off_p50_spread"]) and not one["p50_inside_noise"]


def _store(url: str, trace: Trace, job: str) -> None:
    """Each epoch of `trace` as its own row (messages renumbered per epoch), as the data plane stores it."""
    for e in sorted({a.epoch for a in trace.activities if a.epoch is not None}):
        idx = [i for i, a in enumerate(trace.activities) if a.epoch == e]
        pos = {i: j for j, i in enumerate(idx)}
        one = Trace(tuple(trace.activities[i] for i in idx),
                    tuple(Message(pos[m.src], pos[m.dst], m.kind) for m in trace.messages if m.src in pos))
        with writer.epoch_transaction(url) as s:
            traces.replace_trace(s, traces.trace_row(job, "keycount", e, one))


def test_the_cp_window_takes_the_stored_epochs_of_the_window_and_divides_by_their_median_length(db_url) -> None:
    base_s = 1_700_000_000
    raw = trace_cost.window_trace(window_s=10.0, trigger_ms=500, workers=2)  # 20 epochs from t=0
    shifted = Trace(tuple(type(a)(a.timeline, a.kind, a.start_us + base_s * 10**6, a.end_us + base_s * 10**6, a.epoch)
                          for a in raw.activities), raw.messages)
    _store(db_url, shifted, "j")
    # from 2 s in (the warm-up left out), a 5 s window: epochs 4.. whose trace ends by 7 s
    c = to.cp_window(db_url, "j", "keycount", base_s + 2.0, base_s + 10.0, window_s=5.0, reps=3)
    spans = to.epoch_spans(shifted)
    want = [e for e in range(4, 20) if spans[e][1] <= spans[4][0] + 5_000_000]
    assert (c["first_epoch"], c["last_epoch"], c["epochs"]) == (4, want[-1], len(want))
    assert c["activities"] == len(want) * (8 + 2 * 3)
    lengths = sorted((spans[e][1] - spans[e][0]) / 1000 for e in want)
    assert c["median_epoch_ms"] == pytest.approx(lengths[len(lengths) // 2] if len(lengths) % 2 else
                                                 (lengths[len(lengths) // 2 - 1] + lengths[len(lengths) // 2]) / 2)
    assert c["cp_ms"] > 0 and c["cp_ms_over_epoch_ms"] == pytest.approx(c["cp_ms"] / c["median_epoch_ms"])
    assert c["window_s"] <= 5.0
    none = to.cp_window(db_url, "j", "keycount", base_s + 100.0, base_s + 200.0, window_s=60.0, reps=1)
    assert none["epochs"] == 0 and math.isnan(none["cp_ms_over_epoch_ms"])


def test_the_summary_and_readme_carry_the_figures() -> None:
    cp = [{"run": 1, "epochs": 100, "window_s": 59.5, "cp_ms": 30.0, "median_epoch_ms": 300.0,
           "cp_ms_over_epoch_ms": 0.1, "activities": 1400},
          {"run": 2, "epochs": 90, "window_s": 58.0, "cp_ms": 45.0, "median_epoch_ms": 300.0,
           "cp_ms_over_epoch_ms": 0.15, "activities": 1300}]
    s = to.summarize(to.TRACE_SMOKE, RUNS, cp, {"cp_ms_over_epoch_ms": 0.05})
    assert s["cp_60s_ms_over_epoch_ms"] == pytest.approx(0.125) and s["cp_window_epochs"] == [100, 90]
    assert s["cp_60s_synthetic_ms_over_epoch_ms"] == 0.05 and s["overhead_p50"] == pytest.approx(0.0)
    text = to.readme(s)
    assert text.startswith("# Tracing") and "median over the on-runs / median over the off-runs" in text
    assert "inside the run-to-run noise" in text and "**0.125**" in text


def test_the_run_puts_trace_in_summary_json_the_report_and_a_partial_publish(tmp_path, monkeypatch) -> None:
    import json
    import time

    from bench import run
    from bench.experiments import SMOKE, Ctx

    assert "trace" in run.OPTIONAL and "trace" not in run.ORDER  # only when named in --only
    s_trace = to.summarize(to.TRACE_SMOKE, RUNS, [], {"cp_ms_over_epoch_ms": 0.05})
    machine = {"cores": 2, "ram_gb": 8, "cpu_model": "cpu", "python": "3.11", "spark": "4", "java": "21",
               "loadavg_at_start": [0.5, 0.5, 0.5], "commit_at_start": "abc"}
    ctx = Ctx(run_id="r1", run_dir=tmp_path / "r1", bootstrap="", db_url="", profile=SMOKE)
    summary = run.build_summary(ctx, {"trace": {"summary": s_trace}}, {}, time.time(), machine)
    assert summary["trace"]["overhead_p99"] == pytest.approx(0.05)
    ctx.run_dir.mkdir()
    assert "## 9. Tracing" in run.write_report(ctx.run_dir, summary).read_text()
    (ctx.run_dir / "summary.json").write_text(json.dumps(run.rp.clean(summary)))
    (ctx.run_dir / "trace").mkdir()
    (ctx.run_dir / "trace" / "README.md").write_text(to.readme(s_trace))
    pub = tmp_path / "report"
    pub.mkdir()
    (pub / "summary.json").write_text(json.dumps({"latency": {"kept": 1}, "run_id": "old"}, indent=2))
    monkeypatch.setattr(run, "PUBLISH", pub)
    run.publish(ctx.run_dir, ["trace"])
    merged = json.loads((pub / "summary.json").read_text())
    assert merged["latency"] == {"kept": 1} and merged["trace"]["overhead_p99"] == pytest.approx(0.05)
    assert merged["partial_runs"]["r1"]["only"] == ["trace"] and (pub / "trace.md").exists()


def test_pairs_alternate_their_order_only_when_asked() -> None:
    assert [to.pair_order(i, False) for i in (1, 2, 3)] == [(True, False)] * 3
    assert [to.pair_order(i, True) for i in (1, 2, 3)] == [(True, False), (False, True), (True, False)]
    runs = [_run(1, True, 1100, 2000), _run(1, False, 1000, 1900), _run(2, False, 1200, 2100),
            _run(2, True, 1050, 2200)]
    assert to.overhead(runs)["pair_overheads_p50"] == pytest.approx([0.1, 1050 / 1200 - 1])  # paired by run
