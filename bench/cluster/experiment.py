"""The cluster experiment: both halves run, their figures reduced to the summary (ratios)."""

from __future__ import annotations

import json
import math
import os
import traceback
from dataclasses import asdict
from typing import Any

from bench import report as rp
from bench.cluster.local import local_session
from bench.cluster.metrics import median, safe_ratio
from bench.cluster.profile import OLD_COMMIT, ClusterProfile, profile_for
from bench.cluster.standalone import ClusterStarter, cluster_session
from bench.cluster.writeup import write_files
from bench.experiments import Ctx


def exp_cluster(ctx: Ctx) -> dict[str, Any]:
    C = profile_for(ctx)
    out = ctx.run_dir / "cluster"
    out.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    local: dict[str, Any] = {}
    clus: dict[str, Any] = {}
    starter = ClusterStarter(ctx.run_dir / "cluster-spark").start()
    try:
        local = local_session(ctx, C, out)
        if local.get("precopy_error"):
            errors.append("precopy:\n" + local["precopy_error"])
    except Exception:  # noqa: BLE001 - the cluster half still runs
        errors.append("local session:\n" + traceback.format_exc())
        ctx.log(f"!! [cluster] local session failed:\n{errors[-1]}")
    try:
        clus = cluster_session(ctx, C, out, starter)
        errors += clus.get("errors", [])
    except Exception:  # noqa: BLE001
        errors.append("cluster session:\n" + traceback.format_exc())
        ctx.log(f"!! [cluster] cluster session failed:\n{errors[-1]}")
    finally:
        starter.stop()  # safe to repeat
    summary = summarize(C, local, clus)
    write_files(out, C, local, clus, summary)
    (out / "result.json").write_text(json.dumps(rp.clean({"local": _strip(local), "cluster": _strip(clus)}), indent=1))
    res: dict[str, Any] = {"summary": summary}
    if errors:
        res["errors"] = "\n".join(errors)
    ctx.shared["cluster"] = res
    return res


def _strip(d: dict[str, Any]) -> dict[str, Any]:
    """result.json without the per-epoch rows (those are in the CSVs)."""
    if not isinstance(d, dict):
        return d
    return {k: _strip(v) if isinstance(v, dict) else v for k, v in d.items() if k not in ("rows", "timeline")}


def summarize(C: ClusterProfile, local: dict[str, Any], clus: dict[str, Any]) -> dict[str, Any]:
    nan = math.nan
    old, new = local.get("old", {}), local.get("new", {})
    dvl = {
        "old_commit": OLD_COMMIT, "keys": C.keys, "bins": C.bins, "rate": C.rate, "trigger_ms": C.trigger_ms,
        "old_batch_ms": old.get("batch_ms_median", nan), "new_batch_ms": new.get("batch_ms_median", nan),
        "old_useful_ms": old.get("useful_ms_median", nan), "new_useful_ms": new.get("useful_ms_median", nan),
        "old_batch_ms_mean": old.get("batch_ms_mean", nan), "new_batch_ms_mean": new.get("batch_ms_mean", nan),
        "old_batch_ms_p90": old.get("batch_ms_p90", nan), "new_batch_ms_p90": new.get("batch_ms_p90", nan),
        "old_epochs": old.get("epochs", 0), "new_epochs": new.get("epochs", 0),
        "new_batch_ms_no_snapshot": new.get("batch_ms_median_no_snapshot", nan),
        "new_snapshot_epochs": new.get("snapshot_epochs"),
        "old_input_rows_median": old.get("input_rows_median", nan),
        "new_input_rows_median": new.get("input_rows_median", nan),
    }
    for k in ("batch_ms_per_1k_rows", "useful_us_per_row"):
        dvl[f"old_{k}"], dvl[f"new_{k}"] = old.get(k, nan), new.get(k, nan)
        dvl[f"{k}_ratio"] = safe_ratio(dvl[f"new_{k}"], dvl[f"old_{k}"])
    dvl["batch_ms_ratio"] = safe_ratio(dvl["new_batch_ms"], dvl["old_batch_ms"])
    dvl["useful_ms_ratio"] = safe_ratio(dvl["new_useful_ms"], dvl["old_useful_ms"])
    dvl["batch_ms_mean_ratio"] = safe_ratio(dvl["new_batch_ms_mean"], dvl["old_batch_ms_mean"])
    pcs = local.get("precopy", [])
    on = [r for r in pcs if r["precopy"]]
    off = [r for r in pcs if not r["precopy"]]

    def med(rows: list[dict[str, Any]], k: str) -> float:
        return median([r[k] for r in rows])

    pre = {"keys": C.keys, "bins": C.bins, "bins_moved": pcs[0]["bins"] if pcs else 0, "reps": C.precopy_reps,
           "mode": "local[2]",
           "cutover_ms_with": med(on, "cutover_ms"), "cutover_ms_without": med(off, "cutover_ms"),
           "cutover_batch_ms_with": med(on, "cutover_batch_ms"),
           "cutover_batch_ms_without": med(off, "cutover_batch_ms"),
           "warm_batch_ms_with": med(on, "warm_batch_ms"), "steady_batch_ms": med(pcs, "steady_batch_ms"),
           "keys_moved_with": med(on, "keys_moved"), "keys_moved_without": med(off, "keys_moved"),
           "cutover_snapshots": sum(1 for r in pcs if r.get("cutover_snapshot")),
           "cutover_apply_ms_with": med(on, "cutover_apply_ms") if on and "cutover_apply_ms" in on[0] else nan,
           "cutover_apply_ms_without": med(off, "cutover_apply_ms") if off and "cutover_apply_ms" in off[0] else nan}
    pre["cutover_ms_ratio"] = safe_ratio(pre["cutover_ms_with"], pre["cutover_ms_without"])
    pre["cutover_batch_ms_ratio"] = safe_ratio(pre["cutover_batch_ms_with"], pre["cutover_batch_ms_without"])
    ratio = pre["cutover_ms_ratio"]
    pre["goal_met"] = bool(ratio <= 0.5) if ratio == ratio else None  # NaN: not measured
    nat, bal = clus.get("native", {}), clus.get("ballast", {})
    rec = {"mode": "standalone, 2 workers x 1 core", "keys": C.cluster_keys, "bins": C.cluster_bins,
           "rate": C.recovery_rate, "trigger_ms": C.cluster_trigger_ms,
           "observe_s": C.observe_s, "ballast_executors_back_s": bal.get("executors_back_s", nan),
           **{f"{who}_{k}": d.get(k, nan) for who, d in (("ballast", bal), ("native", nat))
              for k in ("first_batch_s", "steady_batch_s", "extra_s", "max_batch_s", "max_gap_s")},
           "ballast_s": bal.get("recovery_s", nan), "native_s": nat.get("recovery_s", nan)}
    rec["ballast_over_native"] = safe_ratio(rec["ballast_s"], rec["native_s"])
    so = clus.get("scale_out", {})
    sc = {"mode": "standalone, 4 workers x 1 core, job 2 -> 4 executors", "rate": C.scale_rate,
          "max_offsets": C.cluster_max_offsets,
          "throughput_before": so.get("before", {}).get("rows_per_s", nan),
          "throughput_after": so.get("after", {}).get("rows_per_s", nan),
          "epochs_before": so.get("before", {}).get("epochs"), "epochs_after": so.get("after", {}).get("epochs"),
          "rows_per_batch_s_median_before": so.get("before", {}).get("rows_per_batch_s_median", nan),
          "rows_per_batch_s_median_after": so.get("after", {}).get("rows_per_batch_s_median", nan),
          "max_epoch_gap_s": so.get("max_epoch_gap_s", nan), "steady_epoch_gap_s": so.get("steady_epoch_gap_s", nan),
          "max_epoch_gap_to_end_s": so.get("max_epoch_gap_to_end_s", nan),
          "duration_s": so.get("duration_s", nan), "steps": so.get("steps"), "bins_moved": so.get("bins_moved"),
          "executors_before": so.get("executors_before"), "executors_after": so.get("executors_after"),
          "saturated_before": so.get("saturated_before"),
          "batch_ms_before": so.get("before", {}).get("batch_ms_median", nan),
          "batch_ms_after": so.get("after", {}).get("batch_ms_median", nan),
          "machine_cores": os.cpu_count()}
    sc["throughput_ratio"] = safe_ratio(sc["throughput_after"], sc["throughput_before"])
    return {"durable_vs_local": dvl, "precopy": pre, "recovery": rec, "scale_out": sc,
            "profile": asdict(C)}
