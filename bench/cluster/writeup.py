"""The cluster experiment's files: CSVs, plots, its README and its section of bench/REPORT.md."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from bench import report as rp
from bench.cluster.metrics import safe_ratio
from bench.cluster.profile import OLD_COMMIT, ClusterProfile


def write_files(out: Path, C: ClusterProfile, local: dict[str, Any], clus: dict[str, Any],
                s: dict[str, Any]) -> None:
    ep_rows = [{"data_plane": label, **{k: r[k] for k in ("epoch", "input_rows", "batch_ms", "useful_ms_sum",
                                                          "useful_ms_max")}}
               for label, key in (("local-only " + OLD_COMMIT, "old"), ("durable HEAD", "new"))
               for r in local.get(key, {}).get("rows", [])]
    rp.write_csv(out / "durable_vs_local_epochs.csv", ep_rows)
    rp.write_csv(out / "precopy.csv", local.get("precopy", []))
    tl = [{"system": sysname, **r} for sysname in ("ballast", "native")
          for r in clus.get(sysname, {}).get("timeline", [])]
    rp.write_csv(out / "recovery_timeline.csv", tl)
    rp.write_csv(out / "scale_out_epochs.csv", clus.get("scale_out", {}).get("timeline", []))
    d, p, r, so = s["durable_vs_local"], s["precopy"], s["recovery"], s["scale_out"]
    rp.plot_bars(out / "durable_vs_local.png", [f"local-only {OLD_COMMIT}", "durable (HEAD)"],
                 {"median batch ms": [d["old_batch_ms"], d["new_batch_ms"]],
                  "p90 batch ms": [d["old_batch_ms_p90"], d["new_batch_ms_p90"]],
                  "median useful ms (sum of workers)": [d["old_useful_ms"], d["new_useful_ms"]]},
                 f"per-epoch cost, local[2]: {C.keys} keys, B={C.bins}, {C.rate:.0f} rows/s, trigger {C.trigger_ms} ms")
    rp.plot_bars(out / "precopy.png", ["no pre-copy", "pre-copy"],
                 {"move ms at the cut-over": [p["cutover_ms_without"], p["cutover_ms_with"]],
                  "cut-over epoch batch ms": [p["cutover_batch_ms_without"], p["cutover_batch_ms_with"]],
                  "warming epoch batch ms": [math.nan, p["warm_batch_ms_with"]]},
                 f"one step moving {p['bins_moved']} of {C.bins} bins ({C.keys} keys), local[2]")
    if any(clus.get(k, {}).get("timeline") for k in ("ballast", "native")):
        plot_recovery(out / "recovery.png", clus, r, C)
    st = clus.get("scale_out", {}).get("timeline", [])
    if st:
        so_res = clus["scale_out"]
        xs = [x["t_s"] for x in st]
        rate = [x["input_rows"] / (x["batch_ms"] / 1000) if x["batch_ms"] else 0 for x in st]
        marks = [(so_res["t_emit"] - so_res["t0"], "plan"), (so_res["t_end"] - so_res["t0"], "done")] \
            if "t_emit" in so_res else []
        rp.plot_series(out / "scale_out.png", {"input rows / batch time": (xs, rate)},
                       f"scale-out 2 -> 4 executors on {os.cpu_count()} cores, {C.scale_rate:.0f} rows/s offered: "
                       f"{so['throughput_before']:.0f} -> {so['throughput_after']:.0f} rows/s",
                       "rows/s", marks=marks,
                       twin={"W": (xs, [x["workers"] for x in st])}, twin_label="workers")
    (out / "README.md").write_text(readme(C, s))


@rp.locked
def plot_recovery(path: Path, clus: dict[str, Any], r: dict[str, Any], C: ClusterProfile) -> Path:
    """One row per system, one bar per batch from its start to its end (s after the kill)."""
    fig, ax = rp.plt.subplots(figsize=(10, 2.8))
    rows = (("ballast", "Ballast epochs", "C0"), ("native", "Spark RocksDB batches", "C1"))
    for y, (who, _label, color) in enumerate(rows):
        t = clus.get(who, {}).get("timeline", [])
        ax.broken_barh([(x["start_rel_kill_s"], x["duration_s"]) for x in t], (y - 0.35, 0.7), facecolors=color,
                       edgecolors="white", linewidth=0.6)
    ax.axvline(0.0, color="red", lw=1.2)
    ax.annotate("SIGKILL", (0.0, len(rows) - 0.5), fontsize=7, color="red", xytext=(3, 0), textcoords="offset points")
    ax.set_yticks(range(len(rows)), [label for _, label, _ in rows], fontsize=8)
    ax.set_xlabel("s after the executor was killed (each bar: one batch, start to commit)")
    ax.set_title(f"executor loss, 2 workers x 1 core: first commit after the kill Ballast {r['ballast_s']:.1f} s, "
                 f"Spark {r['native_s']:.1f} s; longest batch in {C.observe_s:.0f} s: {r['ballast_max_batch_s']:.1f} / "
                 f"{r['native_max_batch_s']:.1f} s", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return rp._save(fig, path)


def readme(C: ClusterProfile, s: dict[str, Any]) -> str:
    d, p, r, so = s["durable_vs_local"], s["precopy"], s["recovery"], s["scale_out"]
    f = rp.md_table
    return "\n".join([
        "# Cluster data plane", "",
        f"## Per-epoch cost: durable state vs local-only stores (local[2], {C.keys} keys, B={C.bins}, W=2)", "",
        f"Same key-count job and topic, open loop {C.rate:.0f} rows/s, trigger {C.trigger_ms} ms, one after the other: "
        f"the local-only data plane of `{OLD_COMMIT}` (git worktree), then this checkout. Epochs that started "
        f"{C.skip_s:.0f} s into each window (at least {C.steady_s:.0f} s and {C.min_epochs} epochs) and read input.",
        "",
        f([{"data plane": f"local-only ({OLD_COMMIT})", "epochs": d["old_epochs"],
            "rows/epoch": d["old_input_rows_median"],
            "batch ms median": d["old_batch_ms"], "mean": d["old_batch_ms_mean"], "p90": d["old_batch_ms_p90"],
            "useful ms median": d["old_useful_ms"]},
           {"data plane": "durable (HEAD)", "epochs": d["new_epochs"], "rows/epoch": d["new_input_rows_median"],
            "batch ms median": d["new_batch_ms"], "mean": d["new_batch_ms_mean"], "p90": d["new_batch_ms_p90"],
            "useful ms median": d["new_useful_ms"]}],
          ["data plane", "epochs", "rows/epoch", "batch ms median", "mean", "p90", "useful ms median"]), "",
        f"The durable run's window had {d['new_snapshot_epochs']} snapshot epoch(s) (every worker writes its whole "
        f"state; `--snapshot-every` 10); its median without them: {d['new_batch_ms_no_snapshot']:.0f} ms.", "",
        "Per input row (the runs' epochs can differ in size): batch ms per 1k rows "
        f"{d['old_batch_ms_per_1k_rows']:.0f} "
        f"-> {d['new_batch_ms_per_1k_rows']:.0f} (ratio {d['batch_ms_per_1k_rows_ratio']:.2f}), useful µs per row "
        f"{d['old_useful_us_per_row']:.1f} -> {d['new_useful_us_per_row']:.1f} "
        f"(ratio {d['useful_us_per_row_ratio']:.2f}).",
        "",
        f"Ratios durable / local-only: batch_ms **{d['batch_ms_ratio']:.2f}** (mean {d['batch_ms_mean_ratio']:.2f}), "
        f"useful_ms **{d['useful_ms_ratio']:.2f}** (useful = the tasks' fold time summed over workers; the durable "
        "object write comes after it and shows in batch_ms only).", "",
        f"## Cut-over pause with and without pre-copy (local[2], {C.keys} keys, {p['bins_moved']} of {C.bins} bins)",
        "",
        f([{"step": "without pre-copy", "move ms": p["cutover_ms_without"],
            "cut-over epoch ms": p["cutover_batch_ms_without"],
            "of which apply phase ms": p["cutover_apply_ms_without"], "keys at cut-over": p["keys_moved_without"],
            "warming epoch ms": math.nan},
           {"step": "with pre-copy", "move ms": p["cutover_ms_with"], "cut-over epoch ms": p["cutover_batch_ms_with"],
            "of which apply phase ms": p["cutover_apply_ms_with"], "keys at cut-over": p["keys_moved_with"],
            "warming epoch ms": p["warm_batch_ms_with"]}],
          ["step", "move ms", "cut-over epoch ms", "of which apply phase ms", "keys at cut-over", "warming epoch ms"]),
        "",
        "Apply phase = the runner's driver-side time up to the durable commit (control rows, decision, the Spark "
        "job whose tasks move and fold, the manifest); the rest of an epoch is the metrics DB, acks and Spark's "
        "own micro-batch work.", "",
        f"Medians over {C.precopy_reps} pair(s) (every plan in precopy.csv; `cutover_snapshot` marks a cut-over "
        f"epoch that also wrote a state snapshot: {p['cutover_snapshots']} of them); steady epoch "
        f"{p['steady_batch_ms']:.0f} ms. Ratio with / without: move "
        f"**{p['cutover_ms_ratio']:.2f}** (goal <= 0.5), cut-over epoch **{p['cutover_batch_ms_ratio']:.2f}**. "
        "The pre-copy "
        "step loads the bins in the epoch that receives it (warming epoch), inside that epoch's tasks.", "",
        "## Recovery after an executor loss (standalone, 2 workers x 1 core)", "",
        f([{"system": label, "kill -> first commit s": r[f"{who}_s"], "that batch s": r[f"{who}_first_batch_s"],
            "steady batch s": r[f"{who}_steady_batch_s"], "extra s": r[f"{who}_extra_s"],
            f"longest batch in {C.observe_s:.0f} s": r[f"{who}_max_batch_s"],
            f"longest gap in {C.observe_s:.0f} s": r[f"{who}_max_gap_s"]}
           for who, label in (("ballast", "Ballast (durable state)"), ("native", "Spark groupBy.count (RocksDB)"))],
          ["system", "kill -> first commit s", "that batch s", "steady batch s", "extra s",
           f"longest batch in {C.observe_s:.0f} s", f"longest gap in {C.observe_s:.0f} s"]), "",
        f"{C.cluster_keys} keys, {C.recovery_rate:.0f} rows/s, trigger {C.cluster_trigger_ms} ms, "
        f"maxOffsetsPerTrigger {C.cluster_max_offsets}; SIGKILL of one executor {C.kill_delay_s} s after a "
        f"commit was observed; both jobs watched for {C.observe_s:.0f} s after it. The master relaunches the "
        "executor; until it registers the surviving one runs both tasks (Ballast: the lost worker's bins are "
        "rebuilt there from the durable state), and the replacement's first tasks pay a cold start (Python "
        f"workers, Kafka consumer, and for Ballast the cache rebuild again). Ballast's heartbeat (written at each "
        f"commit) reported 2 executors again {r['ballast_executors_back_s']:.0f} s after the kill.", "",
        f"## Scale-out 2 -> 4 executors (standalone, 4 workers x 1 core on {so['machine_cores']} cores)", "",
        f([{"phase": "before (W=2)", "epochs": so["epochs_before"], "rows/s": so["throughput_before"],
            "median batch ms": so["batch_ms_before"],
            "median epoch rows / batch s": so["rows_per_batch_s_median_before"],
            "executors": so["executors_before"]},
           {"phase": "after (W=4)", "epochs": so["epochs_after"], "rows/s": so["throughput_after"],
            "median batch ms": so["batch_ms_after"], "median epoch rows / batch s": so["rows_per_batch_s_median_after"],
            "executors": so["executors_after"]}],
          ["phase", "epochs", "rows/s", "median batch ms", "median epoch rows / batch s", "executors"]), "",
        "rows/s = the window's input rows / its span (what the job sustained); the median epoch's rows per second "
        "of its own batch time is the same without the gaps between epochs and robust to one stalled epoch.", "",
        f"Offered {C.scale_rate:.0f} rows/s (open loop), maxOffsetsPerTrigger {C.cluster_max_offsets}; saturated "
        f"before: {so['saturated_before']}. Plan: {so['steps']} batched steps, {so['bins_moved']} bins, "
        f"{so['duration_s']:.1f} s; longest gap between epochs during it **{so['max_epoch_gap_s']:.2f} s** (steady "
        f"{so['steady_epoch_gap_s']:.2f} s); from the plan to the end of the after window (the new executors' "
        f"first tasks, whenever Spark schedules them, pay a cold start): {so['max_epoch_gap_to_end_s']:.2f} s. "
        f"Four 1-core executors on a {so['machine_cores']}-core machine cannot "
        "be faster than two: this measures what the change costs, not a speed-up.", "",
        "![](durable_vs_local.png)", "", "![](precopy.png)", "", "![](recovery.png)", "", "![](scale_out.png)", "",
    ])


def report_section(s: dict[str, Any]) -> str:
    """The headline table of REPORT.md: each figure against its same-run baseline."""
    d, p, r, so = s["durable_vs_local"], s["precopy"], s["recovery"], s["scale_out"]
    rows = [
        {"figure": "median batch ms per epoch (local[2])", "baseline": f"local-only {d['old_commit']}",
         "baseline_value": d["old_batch_ms"], "value": d["new_batch_ms"], "ratio": d["batch_ms_ratio"]},
        {"figure": "median operator useful ms per epoch", "baseline": f"local-only {d['old_commit']}",
         "baseline_value": d["old_useful_ms"], "value": d["new_useful_ms"], "ratio": d["useful_ms_ratio"]},
        {"figure": f"cut-over move ms ({p['bins_moved']} bins, {p['keys']} keys)", "baseline": "no pre-copy",
         "baseline_value": p["cutover_ms_without"], "value": p["cutover_ms_with"], "ratio": p["cutover_ms_ratio"]},
        {"figure": "cut-over epoch batch ms", "baseline": "no pre-copy",
         "baseline_value": p["cutover_batch_ms_without"],
         "value": p["cutover_batch_ms_with"], "ratio": p["cutover_batch_ms_ratio"]},
        {"figure": "executor SIGKILL -> first commit s", "baseline": "Spark RocksDB groupBy.count",
         "baseline_value": r["native_s"], "value": r["ballast_s"], "ratio": r["ballast_over_native"]},
        {"figure": f"throughput rows/s, 2 -> 4 executors ({so['machine_cores']} cores)", "baseline": "before (W=2)",
         "baseline_value": so["throughput_before"], "value": so["throughput_after"], "ratio": so["throughput_ratio"]},
        {"figure": "longest epoch gap during 2 -> 4 s", "baseline": "steady gap",
         "baseline_value": so["steady_epoch_gap_s"],
         "value": so["max_epoch_gap_s"], "ratio": safe_ratio(so["max_epoch_gap_s"], so["steady_epoch_gap_s"])},
    ]
    return rp.md_table(rows, ["figure", "baseline", "baseline_value", "value", "ratio"]) + \
        "\n\nDetails: cluster/README.md of the run (docs/benchmarks.md, experiment 5)."
