"""`python -m bench.run --smoke` end to end against real Kafka and Spark: checks SHAPES, not times.

Ratios are against baselines measured in the same run, never against fixed numbers.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from bench.run import REQUIRED_KEYS, _get
from tests.helpers.bench_smoke import BackgroundSmoke

pytestmark = [pytest.mark.bench, pytest.mark.slow]


@pytest.fixture(scope="session")
def smoke_run(bench_smoke: BackgroundSmoke) -> Path:
    """The result dir of the smoke run the session started in the background (tests/conftest.py)."""
    return bench_smoke.wait(timeout=3000)


@pytest.mark.timeout(3100)
def test_summary_has_every_key(smoke_run: Path) -> None:
    s = json.loads((smoke_run / "summary.json").read_text())
    for k in REQUIRED_KEYS:
        _get(s, k)
    assert not s["errors"]
    assert s["commit"] and s["machine"]["cores"] >= 1 and s["machine"]["spark"]
    for k in ("max_latency_ms", "duration_s", "peak_rss_mb"):
        assert set(s["migration"][k]) == {"all-at-once", "fluid", "batched", "batched-gap"}, k


@pytest.mark.timeout(3100)
def test_shapes(smoke_run: Path) -> None:
    s = json.loads((smoke_run / "summary.json").read_text())
    m = s["migration"]
    # Megaphone's shape: all-at-once moves the most state in one step (the longest single pause) and takes
    # the shortest time. The step's SIZE is the plan's doing and is asserted strictly, from the bytes each
    # step's checkpoint says it moved. Its TIME at smoke scale (200 k keys, each step 50-200 ms) is a step's
    # fixed cost plus the noise of a machine the rest of the suite shares: a clean-clone CI run measured
    # all-at-once 140 ms against batched steps whose median was 159 ms. So the times are checked only for
    # what noise cannot reverse (the whole state in one step is slower than the quickest quarter of it);
    # at the full run's scale the order is plain (bench/report/migration-b256.md, 2 M keys: move_ms_max_step
    # all-at-once 1 416 ms, batched 233 ms, fluid 179 ms).
    with open(smoke_run / "migration-b64" / "migrations.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["role"] == "measured"]
    steps = {r["strategy"]: json.loads(r["step_ms"]) for r in rows}
    sizes = {r["strategy"]: json.loads(r["step_bytes"]) for r in rows}
    assert len(steps["all-at-once"]) == 1 and len(steps["batched"]) > 1 and len(steps["fluid"]) > len(steps["batched"])
    biggest = sizes["all-at-once"][0]
    assert biggest > max(sizes["batched"]) and biggest > max(sizes["fluid"]), sizes
    assert steps["all-at-once"][0] > min(steps["batched"]) and steps["all-at-once"][0] > min(steps["fluid"]), steps
    assert all(math.isfinite(v) and v > 0 for v in m["max_latency_ms"].values())
    assert m["duration_s"]["all-at-once"] < m["duration_s"]["fluid"]
    # a gap between steps is a lower bound on the plan's duration ("not before" times)
    assert m["duration_s"]["batched-gap"] >= (m["steps"]["batched-gap"] - 1) * m["gap_s"]
    assert 0 < m["steady_p99_ms"]
    t = s["throughput"]
    assert t["ballast_rows_per_s"] > 0 and t["spark_native_rows_per_s"] > 0
    r = s["reconfig"]
    # stop + restart of Spark's query is a real outage: longer than Ballast's longest epoch gap
    assert r["spark_restart_downtime_s"] > r["ballast_downtime_s"] > 0
    d = s["ds2"]
    assert isinstance(d["decisions_to_converge"], dict) and d["decisions_evaluated"] > 0
    assert not any(math.isnan(v) for v in m["max_latency_ms"].values() if isinstance(v, float))


@pytest.mark.timeout(3100)
def test_files(smoke_run: Path) -> None:
    for exp, files in {
        "migration-b64": ["migrations.csv", "timeline.csv", "rss.csv", "latency_timeline.png", "latency_ccdf.png",
                          "strategies.png", "README.md"],
        "bins": ["bins.csv", "latency_vs_duration.png", "cost_per_record.png", "README.md"],
        "native": ["throughput.csv", "reconfig.csv", "native_vs_ballast.png", "reconfig_backlog.png", "README.md"],
        "ds2": ["decisions.csv", "phases.csv", "epochs.csv", "ds2_timeline.png", "README.md"],
        "latency": ["latency.csv", "latency_p99.png", "epoch_breakdown.png", "lat-native-t500.epochs.csv",
                    "lat-ballast-t500.epochs.csv", "README.md"],
        "cluster": ["durable_vs_local_epochs.csv", "precopy.csv", "recovery_timeline.csv", "scale_out_epochs.csv",
                    "durable_vs_local.png", "precopy.png", "recovery.png", "scale_out.png", "README.md"],
        "nexmark": ["migrations.csv", "cost.csv", "migration.png", "cost.png", "README.md"],
    }.items():
        for f in files:
            p = smoke_run / exp / f
            assert p.exists() and p.stat().st_size > 0, p
    assert (smoke_run / "REPORT.md").read_text().startswith("# Ballast benchmark report")


@pytest.mark.timeout(3100)
def test_cluster_shapes(smoke_run: Path) -> None:
    """Experiment 5 at smoke scale: every figure measured, and what holds by construction (counts,
    not times): a pre-copied step replays only the changes since it was warmed, and the scale-out
    holds 2 executors before and 4 after. Time ratios are reported, not asserted."""
    c = json.loads((smoke_run / "summary.json").read_text())["cluster"]

    def pos(v: object) -> bool:
        return isinstance(v, (int, float)) and math.isfinite(v) and v > 0

    d, p, r, so = c["durable_vs_local"], c["precopy"], c["recovery"], c["scale_out"]
    assert d["old_epochs"] >= 3 and d["new_epochs"] >= 3, d
    assert all(pos(d[k]) for k in ("old_batch_ms", "new_batch_ms", "batch_ms_ratio", "useful_ms_ratio")), d
    assert pos(p["cutover_ms_without"]) and p["cutover_ms_with"] >= 0 and pos(p["cutover_batch_ms_ratio"]), p
    assert p["keys_moved_with"] < p["keys_moved_without"], p
    assert pos(r["ballast_s"]) and pos(r["native_s"]), r
    assert pos(so["throughput_before"]) and pos(so["throughput_after"]) and pos(so["max_epoch_gap_s"]), so
    assert (so["executors_before"], so["executors_after"]) == (2, 4), so


@pytest.mark.timeout(3100)
def test_latency_shapes(smoke_run: Path) -> None:
    """Experiment 6 at smoke scale: every latency figure and ratio
    (Ballast / native p99, first epoch / steady, saturation) is measured for both systems; values are reported,
    not asserted (a shared 2-core machine)."""
    lat = json.loads((smoke_run / "summary.json").read_text())["latency"]
    row = lat["by_trigger_rate"]["t500@1000"]
    for k in ("native_p99_ms", "ballast_p99_ms", "p99_ratio", "native_max_ms", "ballast_max_ms"):
        assert isinstance(row[k], (int, float)) and math.isfinite(row[k]) and row[k] > 0, (k, row)
    t = lat["t500"]
    for sys_ in ("native", "ballast"):
        assert t["saturation_rows_per_s"][sys_] > 0 and t["cold_restart_ratio"][sys_] > 0, t
        assert t["breakdown_median_ms"][sys_]["batch_ms"] > 0, t


@pytest.mark.timeout(3100)
def test_nexmark_shapes(smoke_run: Path) -> None:
    """Experiment 7 at smoke scale: for each query run, both migrations and the cost of both systems
    were measured (finite, positive) and their ratios exist; what holds by construction is asserted
    (the same bins moved in 1 step and in several), times are reported, not asserted."""
    nx = json.loads((smoke_run / "summary.json").read_text())["nexmark"]

    def pos(v: object) -> bool:
        return isinstance(v, (int, float)) and math.isfinite(v) and v > 0

    assert nx["backlog_events"] > 0 and nx["migration"] and nx["cost"], nx
    for q, d in nx["migration"].items():
        for strat in ("all-at-once", "batched"):
            assert pos(d["max_latency_ms"][strat]) and pos(d["duration_s"][strat]), (q, d)
        assert pos(d["max_latency_ratio_all_at_once_over_batched"]), (q, d)
        assert d["steps"]["all-at-once"] == 1 < d["steps"]["batched"], (q, d)
        assert d["bins_moved"]["all-at-once"] == d["bins_moved"]["batched"] > 0, (q, d)
    for q, c in nx["cost"].items():
        assert pos(c["ballast_ms_per_event"]) and pos(c["native_ms_per_event"]) and pos(c["ratio"]), (q, c)
        # what held each operator's data epochs back, from the traces the job stored (bench.cp_summary)
        assert c["critical_path"] and all(cp["epochs"] > 0 and 0 < cp["top"][0]["share"] <= 1
                                          for cp in c["critical_path"].values()), (q, c)
