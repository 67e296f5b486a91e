"""Experiments 1 and 2. `migration` (Megaphone §5.3): all-at-once vs fluid vs batched vs
batched-with-gap; `bins` (Megaphone §5.3.1, fig. 16): bin count vs max latency / duration, and the
steady-state cost per record against a B=1 (no bins) baseline.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import report as rp
from bench.ballast_job import (
    BallastJob,
    JobSpec,
    OffsetLogTail,
    half_of_half,
    offset_ranges,
    output_times,
    record_latencies,
)
from bench.experiments.common import Ctx, Profile, _gen_stats, _prefill, _start_gen, catchup_rate, wait_steady
from bench.hist import LogHistogram, timeline
from bench.infra import ensure_topics, unix, wait_until
from bench.loadgen import Schedule
from bench.rss import RssSampler


def migration_session(ctx: Ctx, label: str, bins: int, keys: int, strategies: tuple[str, ...],
                      max_steps: int | None = None, reconfig: bool = False, *,
                      spec_extra: dict[str, Any] | None = None,
                      target_of: Callable[[list[int], int], list[int]] = half_of_half,
                      setup: bool = True, clean_steady: bool = False,
                      act: Callable[[BallastJob, str], dict[str, Any]] | None = None,
                      names: tuple[str, str] = ("key-count", "migration"), prefill: bool = True,
                      warm_s: float = 0.0, answer_at_commit: bool = False) -> dict[str, Any]:
    """One job: prefill `keys`, catch up, open-loop load, a set-up migration (uniform → half of half,
    all-at-once), then one measured migration per strategy, alternating direction; optionally a
    live rescale W → reconfig_to_workers at the end (experiment 3).

    `spec_extra`: JobSpec fields (another operator, its environment, job arguments); `target_of`:
    the map the migrations go to from the uniform one (and back); `setup=False`: no set-up
    migration, the first measured one leaves the uniform map. `clean_steady`: before each measured
    migration, first wait until the job keeps up, then the `steady_s` that are its steady window (a
    migration whose backlog outlasts `settle_s` would otherwise leak into the next one's window).
    `act`: what each measured action does instead of a migration (the upgrade experiment); `names`:
    the operator and the action as the plots' titles say them. `prefill=False`: no key is written
    before the job starts (a windowed operator's state is its open windows, built by the load);
    `warm_s`: seconds of load before the first measured action (until the windows are full);
    `answer_at_commit`: a record's answer time is its epoch's commit, not its epoch's last output
    (a windowed operator answers only when a window closes)."""
    P = ctx.profile
    out = ctx.run_dir / label
    out.mkdir(parents=True, exist_ok=True)
    topic = ctx.name(label) + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    t_prefill = time.time()
    if prefill:
        _prefill(ctx, topic, keys)
    prefill_s = time.time() - t_prefill
    spec = JobSpec(job=ctx.name(label), input_topic=topic, bins=bins, workers=P.workers, db_url=ctx.db_url,
                   bootstrap=ctx.bootstrap, run_dir=ctx.run_dir, trigger_ms=P.trigger_ms,
                   max_offsets_per_trigger=P.catchup_max_offsets, **(spec_extra or {}))
    job = BallastJob(spec).start()
    rss = RssSampler(job.proc.pid).start()  # type: ignore[union-attr]
    tail = OffsetLogTail(spec.checkpoint_dir, topic).start()
    gen = None
    migrations: list[dict[str, Any]] = []
    result: dict[str, Any] = {"label": label, "bins": bins, "keys": keys, "workers": P.workers, "topic": topic,
                              "job": spec.job, "prefill_s": prefill_s}
    try:
        if prefill:
            job.wait_caught_up(keys, P.timeouts_s)
            result["catchup"] = catchup_rate(job, keys)
            ctx.log(f"[{label}] caught up on {keys} keys: {result['catchup'].get('rows_per_s', 0):.0f} rows/s")
        gen, sched_path = _start_gen(ctx, topic, keys, f"{P.rate}:{100000}", label)
        if not prefill:  # the job's first epoch, which reads the load's start
            wait_until(lambda: job.last_epoch() >= 0, P.timeouts_s, f"{spec.job}'s first epoch", proc=job.proc)
        wait_steady(ctx, job, P.rate, P.steady_s)
        if warm_s:
            ctx.log(f"[{label}] {warm_s:.0f} s of load before the first measured action")
            time.sleep(warm_s)
        _, w, uniform = job.current_map()
        half = target_of(uniform, w)
        if bins > 1:
            targets = [half, uniform]
            if setup:
                first = job.migrate(half, "all-at-once", timeout=P.timeouts_s)
                first["role"] = "setup"
                migrations.append(first)
                targets = [uniform, half]
            for i, strat in enumerate(strategies):
                if clean_steady:
                    wait_steady(ctx, job, P.rate, P.settle_s)
                    time.sleep(P.steady_s)
                else:
                    wait_steady(ctx, job, P.rate, P.steady_s + P.settle_s)
                n_moving = sum(1 for a, b in zip(job.current_map()[2], targets[i % 2]) if a != b)
                batch_bins = max(1, math.ceil(n_moving / P.batch_steps))
                m = act(job, strat) if act is not None else job.migrate(
                    targets[i % 2], strat, batch_bins=batch_bins, gap_s=P.gap_s if strat == "batched-gap" else 0.0,
                    timeout=P.timeouts_s, max_steps=max_steps if strat != "all-at-once" else None)
                m["role"] = "measured"
                migrations.append(m)
                ctx.log(f"[{label}] {strat}: {m['steps']} steps, {m['bins']} bins, {m['keys_moved']} keys "
                        f"in {m['duration_s']:.1f}s")
            if reconfig:
                wait_steady(ctx, job, P.rate, P.steady_s + P.settle_s)
                _, w, cur = job.current_map()
                from ballast.policy import place

                load, size = job.bin_stats()
                target = place(cur, P.reconfig_to_workers, [x + 1.0 for x in load], size)
                n_moving = sum(1 for a, b in zip(cur, target) if a != b)
                m = job.migrate(target, "batched", batch_bins=max(1, math.ceil(n_moving / P.batch_steps)),
                                timeout=P.timeouts_s)
                m["role"] = "reconfig"
                migrations.append(m)
                ctx.log(f"[{label}] live rescale {w}->{P.reconfig_to_workers}: "
                        f"{m['steps']} steps in {m['duration_s']:.1f}s")
        time.sleep(P.steady_s)
    finally:
        if gen is not None:
            gen.stop(timeout=60)
        time.sleep(1.5)
        job.stop()
        rss.stop()
        known_ends = tail.stop()
    result["generator"] = _gen_stats(sched_path) if gen is not None else {}
    result["epochs"] = [{"epoch": e.epoch, "ended_at": unix(e.ended_at), "started_at": unix(e.started_at),
                         "input_rows": e.input_rows, "batch_ms": e.batch_ms, "migration_ms": e.migration_ms,
                         "backlog": e.backlog, "workers": e.workers, "map_version": e.map_version}
                        for e in job.epochs()]
    wk = job.worker_rows([e["epoch"] for e in result["epochs"]])
    # ---------------------------------------------------------------- latency analysis
    sched = Schedule.load(sched_path)
    ranges = offset_ranges(spec.checkpoint_dir, topic, known_ends)
    answers = ({e["epoch"]: e["ended_at"] for e in result["epochs"]} if answer_at_commit
               else output_times(ctx.bootstrap, f"{spec.job}.output", int(sched.t0 * 1000) - 2000))
    lat = record_latencies(sched, ranges, answers)
    result["records_measured"] = int(lat.lat_ms.size)
    result["records_unanswered"] = lat.unanswered
    t_ref = sched.t0
    rows_out: list[dict[str, Any]] = []
    tl_rows: list[dict[str, Any]] = []
    series: dict[str, Any] = {}
    hists: dict[str, LogHistogram] = {}
    steady_all = LogHistogram()
    for m in migrations:
        t0, t1 = m["t_emit"], m["t_end"] + P.settle_s
        h = LogHistogram()
        h.record(lat.window(t0, t1))
        st = LogHistogram()
        st.record(lat.window(t0 - P.steady_s, t0))
        if m["role"] == "measured":
            steady_all.merge(st)
        rss_base = rss.median_mb(t0 - P.steady_s, t0)
        peak = rss.peak_mb(t0, t1)
        driver_base = rss.median_mb(t0 - P.steady_s, t0, root=True)
        driver_peak = rss.peak_mb(t0, t1, root=True)
        name = m["strategy"] if m["role"] != "setup" else "setup (all-at-once)"
        if m["role"] == "reconfig":
            name = f"rescale {P.workers}->{P.reconfig_to_workers} (batched)"
        # "downtime": the longest gap between consecutive epoch completions inside the window
        ends = sorted(e["ended_at"] for e in result["epochs"] if t0 - 5 <= e["ended_at"] <= t1 + 5)
        gaps = [b - a for a, b in zip(ends, ends[1:]) if b >= t0]
        steady_ends = sorted(e["ended_at"] for e in result["epochs"] if t0 - P.steady_s <= e["ended_at"] < t0)
        steady_gaps = [b - a for a, b in zip(steady_ends, steady_ends[1:])]
        row = {
            "bins": bins, "keys": keys, "strategy": name, "role": m["role"], "steps": m["steps"],
            "steps_planned": m["steps_planned"], "bins_moved": m["bins"], "keys_moved": m["keys_moved"],
            "bytes_moved": m["bytes_moved"], "state_bytes_moved": m.get("state_bytes_moved"),
            "duration_s": m["duration_s"],
            "duration_extrapolated_s": m["duration_s"] * m["steps_planned"] / max(1, m["steps"]),
            "max_latency_ms": h.max if h.total else math.nan, "p99_latency_ms": h.percentile(99),
            "p50_latency_ms": h.percentile(50), "records_in_window": h.total,
            "steady_p99_ms": st.percentile(99), "steady_max_ms": st.max if st.total else math.nan,
            "peak_rss_mb": peak, "rss_before_mb": rss_base, "rss_delta_mb": peak - rss_base,
            "driver_peak_rss_mb": driver_peak, "driver_rss_delta_mb": driver_peak - driver_base,
            "move_ms_total": m["move_ms_total"], "move_ms_max_step": m["move_ms_max_step"],
            "max_epoch_gap_s": max(gaps) if gaps else math.nan,
            "max_epoch_batch_ms": max((e["batch_ms"] for e in result["epochs"] if t0 <= e["ended_at"] <= t1),
                                      default=math.nan),
            "precopy": m.get("precopy", False), "step_ms": m.get("step_ms", []), "step_bytes": m.get("step_bytes", []),
            "steady_epoch_gap_s": statistics.median(steady_gaps) if steady_gaps else math.nan,
            "gap_s": m["gap_s"], "t_emit_rel_s": t0 - t_ref, "t_end_rel_s": m["t_end"] - t_ref,
            "t_emit": t0, "t_end": m["t_end"], "applied_epochs": m["epochs"],
        }
        rows_out.append(row)
        hists[name] = h
        sel = (lat.t_out >= t0 - P.steady_s) & (lat.t_out < t1 + P.steady_s)
        tl = timeline(lat.t_out[sel], lat.lat_ms[sel], t0)
        series[f"{name}: {m['bins']} bins in {m['steps']} steps"] = (tl, [(0.0, m["t_end"] - t0)])
        tl_rows += rp.timeline_rows(tl, name)
    if not any(m["role"] == "measured" for m in migrations) and lat.t_out.size:
        steady_all.record(lat.window(t_ref + P.steady_s, float(lat.t_out.max()) + 1))  # no migration: all of it
    hists["steady (before each migration)"] = steady_all
    result["migrations"] = rows_out
    result["steady"] = steady_all.summary()
    full_tl = timeline(lat.t_out, lat.lat_ms, t_ref)
    # ---------------------------------------------------------------- files
    rp.write_csv(out / "migrations.csv", rows_out)
    rp.write_csv(out / "timeline_per_migration.csv", tl_rows)
    rp.write_csv(out / "timeline.csv", rp.timeline_rows(full_tl, "all"))
    driver_at = dict(rss.root_samples)
    rp.write_csv(out / "rss.csv", [{"t_s": t - t_ref, "rss_mb": mb, "driver_rss_mb": driver_at.get(t, math.nan)}
                                   for t, mb in rss.samples])
    rp.write_csv(out / "epochs.csv", result["epochs"])
    result["worker_metrics"] = [{"epoch": w.epoch, "worker": w.worker, "records_in": w.records_in,
                                 "useful_ms": w.useful_ms, "wall_ms": w.wall_ms, "state_keys": w.state_keys,
                                 "state_bytes": w.state_bytes} for w in wk]
    rp.write_csv(out / "worker_metrics.csv", result["worker_metrics"])
    result["files"] = {
        "timeline_png": str(rp.plot_timelines(out / "latency_timeline.png", series,
                                              f"{label}: {names[0]}, {keys} keys, B={bins}, W={P.workers}, "
                                              f"{P.rate:.0f} rows/s open loop (t=0: plan emitted)",
                                              span_label=names[1])),
        "cdf_png": str(rp.plot_cdf(out / "latency_ccdf.png", hists, f"{label}: latency during each {names[1]}")),
    }
    meas = [r for r in rows_out if r["role"] == "measured"]
    if meas:
        result["files"]["bars_png"] = str(rp.plot_bars(
            out / "strategies.png", [r["strategy"] for r in meas],
            {"max latency ms": [r["max_latency_ms"] for r in meas], "duration s": [r["duration_s"] for r in meas],
             "peak RSS MB": [r["peak_rss_mb"] for r in meas], "RSS delta MB": [r["rss_delta_mb"] for r in meas],
             "driver RSS delta MB": [r["driver_rss_delta_mb"] for r in meas]},
            f"{label}: B={bins}, {keys} keys"))
    # steady-state operator cost under the open loop (no migration running)
    mig_epochs = {e for m in migrations for e in m["epochs"]}
    steady_w = [w for w in wk if w.epoch not in mig_epochs and w.records_in > 0
                and any(e["epoch"] == w.epoch and e["ended_at"] > t_ref for e in result["epochs"])]
    rec = sum(w.records_in for w in steady_w)
    result["steady_useful_us_per_row"] = 1000 * sum(w.useful_ms for w in steady_w) / rec if rec else math.nan
    st_eps = [e for e in result["epochs"]
              if e["ended_at"] > t_ref + 2 and e["epoch"] not in mig_epochs and e["input_rows"]]
    result["steady_batch_ms_median"] = statistics.median([e["batch_ms"] for e in st_eps]) if st_eps else math.nan
    (out / "README.md").write_text(_migration_md(result, P))
    (out / "result.json").write_text(json.dumps(rp.clean(result), indent=1))
    return result


def _migration_md(res: dict[str, Any], P: Profile) -> str:
    cols = ["strategy", "steps", "bins_moved", "keys_moved", "duration_s", "max_latency_ms", "p99_latency_ms",
            "steady_p99_ms", "peak_rss_mb", "rss_delta_mb", "driver_rss_delta_mb", "move_ms_max_step",
            "max_epoch_gap_s"]
    g = res.get("generator", {})
    return (f"# {res['label']}: key-count migration, B={res['bins']}, {res['keys']} keys, W={res['workers']}\n\n"
            f"Open-loop load {P.rate:.0f} rows/s "
            f"(generator max send lag {g.get('max_send_lag_ms', float('nan')):.0f} ms), "
            f"trigger {P.trigger_ms} ms. Set-up migration uniform → half of half (all-at-once), then one measured "
            f"migration per strategy, alternating direction. Max latency over records answered between plan "
            f"emission and last checkpoint + {P.settle_s:.0f} s; steady = the {P.steady_s:.0f} s before emission.\n\n"
            + rp.md_table(res["migrations"], cols)
            + f"\n\nCatch-up (prefill) throughput: "
            f"{res.get('catchup', {}).get('rows_per_s', float('nan')):,.0f} rows/s; "
            f"records measured: {res['records_measured']}.\n\n"
            "![timeline](latency_timeline.png)\n\n![ccdf](latency_ccdf.png)\n\n![bars](strategies.png)\n")


def exp_migration(ctx: Ctx) -> dict[str, Any]:
    P = ctx.profile
    res: dict[str, Any] = {"by_bins": {}}
    for i, b in enumerate(P.bins):
        # the rescale for experiment 3 rides on the first session (same state, same load)
        r = migration_session(ctx, f"migration-b{b}", b, P.keys, P.strategies, reconfig=(i == 0))
        res["by_bins"][b] = r
    ctx.shared["migration"] = res
    return res


def exp_bins(ctx: Ctx) -> dict[str, Any]:
    P = ctx.profile
    points: dict[str, list[tuple[float, float, str]]] = {}
    rows = []
    done = (ctx.shared.get("migration") or {}).get("by_bins", {})
    for b in P.bins_sweep:
        if b in done and done[b]["keys"] == P.sweep_keys:  # same job shape: reuse experiment 1's session
            r = done[b]
        else:
            r = migration_session(ctx, f"bins-b{b}", b, P.sweep_keys, P.sweep_strategies if b > 1 else (),
                                  max_steps=P.sweep_max_steps)
        for m in r["migrations"]:
            if m["role"] != "measured":
                continue
            points.setdefault(m["strategy"], []).append((m["duration_extrapolated_s"], m["max_latency_ms"], f"B={b}"))
        rows.append({"bins": b, "catchup_rows_per_s": r["catchup"].get("rows_per_s"),
                     "catchup_batch_ms_per_1k_rows": r["catchup"].get("batch_ms_per_1k_rows"),
                     "catchup_useful_us_per_row": r["catchup"].get("useful_us_per_row"),
                     "steady_useful_us_per_row": r["steady_useful_us_per_row"],
                     "steady_batch_ms_median": r["steady_batch_ms_median"],
                     "steady_p99_ms": r["steady"].get("p99_ms"),
                     **{f"{m['strategy']}_max_latency_ms": m["max_latency_ms"]
                        for m in r["migrations"] if m["role"] == "measured"},
                     **{f"{m['strategy']}_duration_s": m["duration_extrapolated_s"]
                        for m in r["migrations"] if m["role"] == "measured"}})
    out = ctx.run_dir / "bins"
    out.mkdir(parents=True, exist_ok=True)
    rp.write_csv(out / "bins.csv", rows, sorted({k for r in rows for k in r}, key=lambda k: (k != "bins", k)))
    rp.plot_scatter(out / "latency_vs_duration.png", points,
                    f"max latency vs duration by bin count ({P.sweep_keys} keys; fluid/batched beyond "
                    f"{P.sweep_max_steps} steps extrapolated)")
    base = next((r for r in rows if r["bins"] == 1), None)
    if base:
        for r in rows:
            for k in ("catchup_useful_us_per_row", "steady_useful_us_per_row", "catchup_batch_ms_per_1k_rows"):
                if base.get(k) and r.get(k) == r.get(k):
                    r[f"{k}_vs_B1"] = r[k] / base[k]
    rp.plot_bars(out / "cost_per_record.png", [f"B={r['bins']}" for r in rows],
                 {"catch-up batch ms / 1k rows": [r.get("catchup_batch_ms_per_1k_rows") for r in rows],
                  "steady useful µs / row": [r.get("steady_useful_us_per_row") for r in rows]},
                 "steady-state cost per record by bin count (B=1: no bins)")
    cols = ["bins", "catchup_rows_per_s", "catchup_batch_ms_per_1k_rows", "catchup_useful_us_per_row",
            "steady_useful_us_per_row", "steady_useful_us_per_row_vs_B1", "steady_p99_ms"] + \
           [f"{s}_{k}" for s in P.sweep_strategies for k in ("max_latency_ms", "duration_s")]
    (out / "README.md").write_text(
        f"# Bin count sweep ({P.sweep_keys} keys, W={P.workers})\n\nB=1 is the no-bins baseline (one bin, "
        "nothing to migrate). fluid/batched durations beyond the measured steps are extrapolated linearly.\n\n"
        + rp.md_table(rows, cols) + "\n\n![](latency_vs_duration.png)\n\n![](cost_per_record.png)\n")
    res = {"rows": rows}
    ctx.shared["bins"] = res
    return res
