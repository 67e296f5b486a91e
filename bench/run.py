"""Benchmark entry point: `python -m bench.run --smoke | --full [--only migration,native,bins,ds2,cluster]`.

`spike` (the migration spike at GBs of state, bench/experiments/spike.py), `trace` (tracing's
latency overhead and the critical-path analysis's cost, bench/experiments/trace_overhead.py),
`reaction` (a load step's reaction time, event-driven vs schedule, in the stack's real Airflow:
bench/experiments/reaction.py), `autotune` (the autotuner against fixed trigger intervals on a
stepped load, bench/experiments/autotune.py) and `upgrade` (a live code upgrade, rollback and shadow
upgrade of a processor holding a GB of state, bench/experiments/upgrade.py) and `handover` (a windowed
operator's bins moved by handover, transfer and pre-copy, bench/experiments/handover.py) run only when named in
`--only`: none is in the default set nor in the smoke run `make test` starts.

Results go to bench/results/<run-id>/ (ignored by git): one directory per experiment with CSVs,
PNGs and a README.md, plus the run's summary.json and REPORT.md. `--publish` also copies the
report, summary.json and the PNGs to bench/report/ (the committed copy; a run of some experiments
only replaces theirs, see `publish`). docs/benchmarks.md explains every figure.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import threading
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import cluster as cl
from bench import experiments as ex
from bench import report as rp
from bench.experiments import (
    autotune,
    ds2,
    handover,
    latency,
    migration,
    native,
    nexmark,
    reaction,
    spike,
    trace_overhead,
    upgrade,
)
from bench.infra import REPO, git_commit, kafka_up, machine_info

RESULTS = REPO / "bench" / "results"
PUBLISH = REPO / "bench" / "report"
ORDER = ("migration", "native", "bins", "ds2", "latency", "cluster", "nexmark")
# a smoke run's experiments after experiment 1, in two lanes side by side (Profile.lanes): the lanes share
# nothing (experiment 1's sessions are done before they start; cluster and nexmark read none of it) and
# take about as long as each other (smoke, beside the suite: 375 s and 422 s one after the other)
LANES = (("native", "bins", "ds2", "latency"), ("cluster", "nexmark"))
OPTIONAL = ("spike", "trace", "reaction", "autotune", "upgrade", "handover")  # only when asked for by name (--only)
RUNNERS = {"autotune": autotune.exp_autotune, "upgrade": upgrade.exp_upgrade, "handover": handover.exp_handover,
           "spike": spike.exp_spike, "trace": trace_overhead.exp_trace, "reaction": reaction.exp_reaction,
           "migration": migration.exp_migration, "native": native.exp_native, "bins": migration.exp_bins,
           "ds2": ds2.exp_ds2, "latency": latency.exp_latency,
           "cluster": cl.exp_cluster, "nexmark": nexmark.exp_nexmark}
# what each experiment contributes to summary.json and to the run directory (for a partial publish)
SUMMARY_KEYS = {"migration": ("migration",), "native": ("throughput", "reconfig"), "bins": ("bins",),
                "ds2": ("ds2",), "latency": ("latency",), "cluster": ("cluster",), "nexmark": ("nexmark",),
                "spike": ("spike",), "trace": ("trace",), "reaction": ("reaction",),
                "autotune": ("autotune",), "upgrade": ("upgrade",), "handover": ("handover",)}
RUN_DIRS = {"autotune": ("autotune",), "upgrade": ("upgrade",), "spike": ("spike",), "trace": ("trace",),
            "handover": ("handover",),
            "reaction": ("reaction",),
            "migration": ("migration-b*",), "native": ("native",), "bins": ("bins", "bins-b*"), "ds2": ("ds2",),
            "latency": ("latency",),
            "cluster": ("cluster",), "nexmark": ("nexmark",)}

# Every key summary.json must have (dotted paths); tests/bench checks them.
REQUIRED_KEYS = (
    "migration.max_latency_ms", "migration.duration_s", "migration.steady_p99_ms", "migration.peak_rss_mb",
    "throughput.ballast_rows_per_s", "throughput.spark_native_rows_per_s", "reconfig.spark_restart_downtime_s",
    "reconfig.ballast_downtime_s", "ds2.decisions_to_converge", "commit", "machine",
    "cluster.durable_vs_local.batch_ms_ratio", "cluster.durable_vs_local.useful_ms_ratio",
    "cluster.precopy.cutover_ms_ratio", "cluster.precopy.cutover_batch_ms_ratio", "cluster.recovery.ballast_s",
    "cluster.recovery.native_s", "cluster.scale_out.throughput_before", "cluster.scale_out.throughput_after",
    "cluster.scale_out.max_epoch_gap_s", "latency.ballast_p99_over_native_worst", "latency.by_trigger_rate",
    "nexmark.migration", "nexmark.cost", "nexmark.backlog_events",
)


def schedule(names: list[str], lanes: bool) -> list[list[list[str]]]:
    """The run's stages, in order: each a list of lanes that run side by side, each lane a list of
    experiments run one after the other. Without `lanes`: one lane per stage, the order of `names`.
    With it: experiment 1 alone first (what the others build on, and the one whose step times the smoke
    compares), then the LANES that have something to run together, then what no lane holds."""
    if not lanes:
        return [[names]] if names else []
    first = [n for n in names if n == "migration"]
    side = [[n for n in lane if n in names] for lane in LANES]
    side = [lane for lane in side if lane]
    rest = [n for n in names if n not in first and not any(n in lane for lane in side)]
    stages = [[first]] if first else []
    if side:
        stages.append(side)
    if rest:
        stages.append([rest])
    return stages


def _get(doc: dict[str, Any], dotted: str) -> Any:
    cur: Any = doc
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise KeyError(dotted)
        cur = cur[part]
    return cur


def build_summary(ctx: ex.Ctx, results: dict[str, Any], errors: dict[str, str], t_start: float,
                  machine: dict[str, Any]) -> dict[str, Any]:
    nan = math.nan
    s: dict[str, Any] = {"run_id": ctx.run_id, "profile": ctx.profile.name,
                         "commit": machine.get("commit_at_start") or git_commit(), "machine": machine,
                         "profile_settings": ctx.profile.__dict__,
                         "migration_reused_from": results.get("migration", {}).get("reused_from"),
                         "started_at": datetime.fromtimestamp(t_start, UTC).isoformat(),
                         "elapsed_s": time.time() - t_start, "errors": errors,
                         "quiet_machine": machine["loadavg_at_start"][0] < 1.5}
    mig = results.get("migration", {}).get("by_bins", {})
    migration: dict[str, Any] = {"max_latency_ms": {}, "duration_s": {}, "steady_p99_ms": nan, "peak_rss_mb": {},
                                 "rss_delta_mb": {}, "p99_latency_ms": {}, "by_bins": {},
                                 "gap_s": ctx.profile.gap_s, "batch_steps": ctx.profile.batch_steps}
    for b, r in sorted(mig.items()):
        meas = [m for m in r["migrations"] if m["role"] == "measured"]
        migration["by_bins"][str(b)] = {
            "keys": r["keys"], "steady_p99_ms": r["steady"].get("p99_ms"),
            **{k: {m["strategy"]: m[k] for m in meas} for k in
               ("max_latency_ms", "duration_s", "peak_rss_mb", "rss_delta_mb", "driver_peak_rss_mb",
                "driver_rss_delta_mb", "p99_latency_ms", "steps", "keys_moved")},
        }
    if mig:
        head = max(mig)  # headline: the largest bin count measured
        hb = migration["by_bins"][str(head)]
        migration.update({"bins": head, "keys": hb["keys"], "max_latency_ms": hb["max_latency_ms"],
                          "duration_s": hb["duration_s"], "peak_rss_mb": hb["peak_rss_mb"],
                          "rss_delta_mb": hb["rss_delta_mb"], "p99_latency_ms": hb["p99_latency_ms"],
                          "driver_peak_rss_mb": hb["driver_peak_rss_mb"],
                          "driver_rss_delta_mb": hb["driver_rss_delta_mb"],
                          "steps": hb["steps"], "keys_moved": hb["keys_moved"],
                          "steady_p99_ms": hb["steady_p99_ms"]})
        ml = hb["max_latency_ms"]
        if ml.get("all-at-once") and ml.get("batched"):
            migration["max_latency_ratio_all_at_once_over_batched"] = ml["all-at-once"] / ml["batched"]
    s["migration"] = migration
    nat = results.get("native", {})
    bt = nat.get("ballast_throughput", {}).get("rows_per_s", nan)
    nt = nat.get("native_throughput", {}).get("rows_per_s", nan)
    s["throughput"] = {"ballast_rows_per_s": bt, "spark_native_rows_per_s": nt,
                       "ballast_over_native": bt / nt if nt and nt == nt else nan,
                       "input": "the migration experiment's prefill topic (each key once), same maxOffsetsPerTrigger"}
    nr, br = nat.get("native_reconfig", {}), nat.get("ballast_reconfig", {})
    s["reconfig"] = {
        "spark_restart_downtime_s": nr.get("downtime_s", nan), "spark_recovery_s": nr.get("recovery_s", nan),
        "spark_offline_repartition_s": nr.get("offline_repartition_s", nan),
        "spark_stop_s": nr.get("stop_s", nan),
        "spark_restart_to_first_batch_s": nr.get("restart_to_first_batch_s", nan),
        "spark_repartition_inner_s": nr.get("repartition_inner_s", nan),
        "spark_state_kept": nr.get("repartition_ok"),
        "spark_state_partitions": [nr.get("state_partitions_before"), nr.get("state_partitions_after")],
        "ballast_downtime_s": br.get("downtime_s", nan), "ballast_migration_duration_s": br.get("duration_s", nan),
        "ballast_max_latency_ms": br.get("max_latency_ms", nan),
        "ballast_steady_batch_gap_s": br.get("steady_batch_gap_s", nan),
        "spark_steady_batch_gap_s": nr.get("steady_batch_gap_s", nan),
        "to_workers": ctx.profile.reconfig_to_workers,
    }
    d = results.get("ds2", {})
    s["ds2"] = {"decisions_to_converge": d.get("decisions_to_converge", {}), "phases": d.get("phases", []),
                "rate": d.get("rate"), "changes": d.get("changes", []), "decisions_evaluated": d.get("decisions")}
    s["bins"] = results.get("bins", {}).get("rows", [])
    lat = dict(results.get("latency") or {})
    lat.pop("runs", None)  # the per-run detail stays in latency/README.md and the CSVs
    s["latency"] = lat or {"ballast_p99_over_native_worst": nan, "by_trigger_rate": {}}
    s["cluster"] = results.get("cluster", {}).get("summary") or cl.summarize(cl.profile_for(ctx), {}, {})
    s["nexmark"] = ((results.get("nexmark") or {}).get("summary")
                    or {"migration": {}, "cost": {}, "backlog_events": None})
    s["spike"] = (results.get("spike") or {}).get("summary") or {}
    s["trace"] = (results.get("trace") or {}).get("summary") or {}
    s["reaction"] = (results.get("reaction") or {}).get("summary") or {}
    s["autotune"] = (results.get("autotune") or {}).get("summary") or {}
    s["upgrade"] = (results.get("upgrade") or {}).get("summary") or {}
    s["handover"] = (results.get("handover") or {}).get("summary") or {}
    return s


def write_report(run_dir: Path, s: dict[str, Any]) -> Path:
    m, t, r, d = s["migration"], s["throughput"], s["reconfig"], s["ds2"]
    strat = list(m.get("max_latency_ms", {}))
    rows = [{"strategy": k, "max_latency_ms": m["max_latency_ms"].get(k), "p99_ms": m["p99_latency_ms"].get(k),
             "duration_s": m["duration_s"].get(k), "peak_rss_mb": m["peak_rss_mb"].get(k),
             "rss_delta_mb": m["rss_delta_mb"].get(k),
             "driver_rss_delta_mb": m.get("driver_rss_delta_mb", {}).get(k)} for k in strat]
    mach = s["machine"]
    lines = [
        f"# Ballast benchmark report — run `{s['run_id']}` ({s['profile']})", "",
        f"commit `{s['commit']}`; {mach['cores']} cores, {mach['ram_gb']} GB, {mach['cpu_model']}; "
        f"Python {mach['python']}, Spark {mach['spark']}, {mach['java']}"
        f"{'; JVM options ' + repr(mach['jvm_options']) if mach.get('jvm_options') else ''}; load average at start "
        f"{mach['loadavg_at_start']} ({'quiet' if s['quiet_machine'] else 'NOT quiet: other work was running'}); "
        f"{s['elapsed_s'] / 60:.1f} min.", "",
        f"## 1. Migration strategies (key-count, B={m.get('bins')}, {m.get('keys')} keys, W=2)", "",
        rp.md_table(rows, ["strategy", "max_latency_ms", "p99_ms", "duration_s", "peak_rss_mb", "rss_delta_mb",
                           "driver_rss_delta_mb"]), "",
        "RSS: `peak_rss_mb`/`rss_delta_mb` cover the job's whole process tree (Spark's Python worker respawns "
        "show up there); `driver_rss_delta_mb` is the job's Python driver alone, where bins move.", "",
        f"Steady p99 (outside migrations): {m.get('steady_p99_ms', float('nan')):.0f} ms. Headline max-latency ratio "
        f"all-at-once / batched: **{m.get('max_latency_ratio_all_at_once_over_batched', float('nan')):.2f}×**.", "",
        "## 3. Spark's own options", "",
        f"Throughput on the same input: Ballast {t['ballast_rows_per_s']:,.0f} rows/s, Spark native groupBy.count "
        f"(RocksDB) {t['spark_native_rows_per_s']:,.0f} rows/s (ratio {t['ballast_over_native']:.2f}).", "",
        f"Changing parallelism 2→{r['to_workers']}: Spark stop + offline state repartition + restart: downtime "
        f"{r['spark_restart_downtime_s']:.1f} s (repartition alone {r['spark_offline_repartition_s']:.1f} s), "
        f"back to steady backlog after {r['spark_recovery_s']:.1f} s; state kept: {r['spark_state_kept']}. "
        "Ballast live: longest "
        f"gap between epochs {r['ballast_downtime_s']:.1f} s (steady {r['ballast_steady_batch_gap_s']:.1f} s), plan "
        f"duration {r['ballast_migration_duration_s']:.1f} s, max latency {r['ballast_max_latency_ms']:.0f} ms.", "",
        "## 4. DS2 closed loop", "",
        f"Rate {d.get('rate')} → ×2 → ÷2; scaling actions to converge per phase: {d.get('decisions_to_converge')}; "
        f"executed changes: {[(c['from'], c['to'], round(c['t_emit_s'], 1)) for c in d.get('changes', [])]}.", "",
        rp.md_table(d.get("phases", []), ["phase", "rate", "scaling_actions", "workers_end", "oracle_workers",
                                          "backlog_peak_after_s", "over_provisioned_worker_s",
                                          "under_provisioned_worker_s"]),
        "", "## 2. Bin count", "",
        rp.md_table(s.get("bins", []), ["bins", "catchup_rows_per_s", "catchup_batch_ms_per_1k_rows",
                                        "steady_useful_us_per_row", "steady_useful_us_per_row_vs_B1",
                                        "all-at-once_max_latency_ms", "batched_max_latency_ms",
                                        "fluid_max_latency_ms"]),
        "", "## 5. Cluster data plane", "", cl.report_section(s["cluster"]),
        "", "## 7. NEXMark", "", nexmark.report_section(s["nexmark"]),
        *(["", "## 8. Spike at a real state size", "", spike.readme(s["spike"]).split("\n", 2)[2]]
          if s.get("spike") else []),
        *(["", "## 9. Tracing: overhead and the analysis's cost", "",
            trace_overhead.readme(s["trace"]).split("\n", 2)[2]] if s.get("trace") else []),
        *(["", "## 10. Reaction to a load step: event-driven vs schedule", "",
            reaction.readme(s["reaction"]).split("\n", 2)[2]] if s.get("reaction") else []),
        *(["", "## 12. Autotuning against fixed trigger intervals", "",
            autotune.readme(s["autotune"]).split("\n", 2)[2]] if s.get("autotune") else []),
        *(["", "## 13. Live code upgrade at a real state size", "",
            upgrade.readme(s["upgrade"]).split("\n", 2)[2]] if s.get("upgrade") else []),
        *(["", "## 14. Handover against transfer and pre-copy", "",
            handover.readme(s["handover"]).split("\n", 2)[2]] if s.get("handover") else []),
        "", "Per-experiment details (tables, timelines, CDFs): the README.md of each directory of the run.",
    ]
    if s["errors"]:
        lines += ["", "## Errors", ""] + [f"- {k}: {v.splitlines()[-1] if v else v}" for k, v in s["errors"].items()]
    p = run_dir / "REPORT.md"
    p.write_text("\n".join(lines) + "\n")
    return p


def _publish_dirs(dirs: list[Path]) -> None:
    """Each experiment directory's PNGs as <dir>__<name>.png and its README.md as <dir>.md (links fixed)."""
    for d in dirs:
        for png in d.rglob("*.png"):
            shutil.copy(png, PUBLISH / f"{png.parent.name}__{png.name}")
        for md in d.rglob("README.md"):
            text = md.read_text()
            for png in md.parent.glob("*.png"):  # the PNGs are flattened to <experiment>__<name>.png
                text = text.replace(f"]({png.name})", f"]({md.parent.name}__{png.name})")
            (PUBLISH / f"{md.parent.name}.md").write_text(text)


def publish(run_dir: Path, only: list[str] | None = None) -> None:
    """Copy the run to bench/report/ (the committed copy).

    A run of every experiment replaces the directory. A run of some (`--only`) replaces only what
    they own: their directories' PNGs and tables, their keys of summary.json (the run that produced
    them is named under `partial_runs`); REPORT.md and every other experiment's files stay."""
    PUBLISH.mkdir(parents=True, exist_ok=True)
    only = list(only or ORDER)
    if set(only) >= set(ORDER):
        for old in PUBLISH.glob("*"):
            if old.is_file():
                old.unlink()
        shutil.copy(run_dir / "summary.json", PUBLISH / "summary.json")
        shutil.copy(run_dir / "REPORT.md", PUBLISH / "REPORT.md")
        _publish_dirs([d for d in run_dir.iterdir() if d.is_dir()])
        return
    dirs = sorted({d for name in only for pat in RUN_DIRS[name] for d in run_dir.glob(pat) if d.is_dir()})
    for d in dirs:
        for old in PUBLISH.glob(f"{d.name}__*.png"):
            old.unlink()
        (PUBLISH / f"{d.name}.md").unlink(missing_ok=True)
    _publish_dirs(dirs)
    target = PUBLISH / "summary.json"
    text = target.read_text() if target.exists() else "{}"
    merged = json.loads(text)
    lines = text.splitlines()
    indent = len(lines[1]) - len(lines[1].lstrip(" ")) if len(lines) > 1 else 2  # keep the file's layout
    new = json.loads((run_dir / "summary.json").read_text())
    for name in only:
        for k in SUMMARY_KEYS[name]:
            merged[k] = new.get(k)
    merged.setdefault("partial_runs", {})[new["run_id"]] = {
        k: new.get(k) for k in ("profile", "commit", "machine", "started_at", "elapsed_s", "errors", "quiet_machine")}
    merged["partial_runs"][new["run_id"]]["only"] = only
    target.write_text(json.dumps(rp.clean(merged), indent=indent or 2, sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.run", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--smoke", action="store_true", help="a few minutes; checks shapes, not absolute numbers")
    g.add_argument("--full", action="store_true", help="the full set (tens of minutes on 2 cores)")
    ap.add_argument("--only", default=",".join(ORDER), help=f"comma list of {ORDER + OPTIONAL}")
    ap.add_argument("--run-id", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                    help="override a profile field, e.g. --set keys=500000 --set 'bins=[256]'")
    ap.add_argument("--publish", action="store_true", help="copy the report, summary.json and PNGs to bench/report/")
    ap.add_argument("--reuse-migration", default=None, metavar="RUN_DIR",
                    help="take experiment 1's finished sessions (migration-b*/result.json) from an earlier run "
                         "instead of running them (experiments 2 and 3 build on them)")
    a = ap.parse_args(argv)
    profile = ex.Profile(**{**ex.FULL.__dict__}) if a.full else ex.Profile(**{**ex.SMOKE.__dict__})
    for kv in a.set:
        k, v = kv.split("=", 1)
        if not hasattr(profile, k):
            ap.error(f"unknown profile field {k}")
        val = json.loads(v)
        setattr(profile, k, tuple(val) if isinstance(val, list) else val)
    only = [x for x in a.only.split(",") if x]
    requested = list(only)  # what --publish covers (a reused experiment 1 counts as part of the run)
    bad = [x for x in only if x not in RUNNERS]
    if bad:
        ap.error(f"unknown experiment(s) {bad}")
    run_id = a.run_id or f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{profile.name}"
    run_dir = RESULTS / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BALLAST_SPARK_LOG_LEVEL", "ERROR")
    t_start = time.time()
    machine = machine_info()
    # the code that ran is the code at the start: a commit made during a long run must not relabel it
    machine["commit_at_start"] = git_commit()
    log_fh = (run_dir / "run.log").open("a")
    log_lock = threading.Lock()  # lanes log from their own threads

    def log(msg: str) -> None:
        line = f"{datetime.now().strftime('%H:%M:%S')} {msg}"
        with log_lock:
            print(line, flush=True)
            log_fh.write(line + "\n")
            log_fh.flush()

    bootstrap = kafka_up()
    from migrations_db.db import migrate

    db_url = f"sqlite:///{run_dir / 'metrics.db'}"
    migrate(db_url)
    ctx = ex.Ctx(run_id=run_id.replace("_", "-").lower(), run_dir=run_dir, bootstrap=bootstrap, db_url=db_url,
                 profile=profile, log=log)
    log(f"bench run {run_id} ({profile.name}): {only}; results in {run_dir}; load {machine['loadavg_at_start']}")
    results: dict[str, Any] = {}
    errors: dict[str, str] = {}
    if a.reuse_migration:
        src = Path(a.reuse_migration)
        by_bins = {}
        for rj in sorted(src.glob("migration-b*/result.json")):
            r = json.loads(rj.read_text())
            by_bins[int(r["bins"])] = r
            dst = run_dir / rj.parent.name
            if not dst.exists():
                shutil.copytree(rj.parent, dst)
        results["migration"] = ctx.shared["migration"] = {"by_bins": by_bins, "reused_from": str(src)}
        log(f"reusing experiment 1 sessions {sorted(by_bins)} from {src}")
        only = [x for x in only if x != "migration"]
    def run(name: str) -> None:
        t0 = time.time()
        log(f"== {name}")
        try:
            results[name] = RUNNERS[name](ctx)
            if isinstance(results[name], dict) and results[name].get("errors"):
                errors[name] = results[name]["errors"]
                log(f"!! {name} partly failed:\n{errors[name]}")
        except Exception:  # noqa: BLE001 - one failed experiment must not lose the others
            errors[name] = traceback.format_exc()
            log(f"!! {name} failed:\n{errors[name]}")
        log(f"== {name} done in {time.time() - t0:.0f}s")

    def run_lane(lane: list[str]) -> None:
        for name in lane:
            run(name)

    for stage in schedule([x for x in ORDER + OPTIONAL if x in only], profile.lanes):
        if len(stage) == 1:
            run_lane(stage[0])
            continue
        log(f"lanes side by side: {' | '.join(' -> '.join(lane) for lane in stage)}")
        threads = [threading.Thread(target=run_lane, args=(lane,), name=f"lane-{i}", daemon=True)
                   for i, lane in enumerate(stage)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    summary = build_summary(ctx, results, errors, t_start, machine)
    rp.write_json(run_dir / "summary.json", summary)
    report = write_report(run_dir, summary)
    if a.publish:
        publish(run_dir, requested)
        log(f"published to {PUBLISH}")
    log(f"summary: {run_dir / 'summary.json'}; report: {report}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
