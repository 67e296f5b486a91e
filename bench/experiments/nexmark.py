"""Experiment 7, NEXMark (issue 10): Megaphone's §5.2 shape on the state-heavy queries, and each
query's cost per event against the same query written with Spark's own operators.

* `migration`: per query of `nexmark_migration_queries` (Q4, Q5, Q8), the Ballast job is fed
  open-loop by bench.nexmark.writer at `nexmark_rate` events/s (None: 0.6 × what its job sustained
  on the backlog, at most `nexmark_max_rate`) for `nexmark_fill_s`, so that it holds the state the
  query keeps at that rate (bounded by what it retains: windows, lateness, open auctions); then
  experiment 1's migrations on its (first) operator: a set-up (uniform → half of half), then
  all-at-once back and batched again, the same bins each way. Latency of an input record = the end
  of the epoch that read it (its outputs are written and its state committed then:
  `epoch_metrics.ended_at`) − its scheduled time; a window answer also waits for the watermark
  (event time + lateness), which is the query, not the system.
* `cost` (bench/experiments/nexmark_cost.py): the writer fills one backlog of
  `nexmark_backlog_events` events once; every query then reads it from the start, under Ballast (one
  CLI job per query) and under Spark's own operators (bench/nexmark_native.py, one Spark application
  per query: the same cold start), the two back to back, in `nexmark_cost_rounds` paired rounds,
  both writing their answers to Kafka.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import report as rp
from bench.ballast_job import BallastJob, JobSpec, OffsetLogTail, half_of_half, offset_ranges
from bench.cp_summary import brief
from bench.experiments.common import Ctx, wait_steady
from bench.experiments.nexmark_cost import PARTITIONS, run_cost
from bench.hist import LogHistogram
from bench.infra import PY, Proc, ensure_topics, unix, wait_until
from bench.nexmark.writer import NexmarkSchedule, OffsetClock
from bench.nexmark.writer import topics as kind_topics
from spark_jobs.runner import QUERY_STARTED

MOD = "spark_jobs.nexmark"
#: query -> (the job's --operator values, the operator that is migrated and timed); a chain's
#: --operator values are NAME=PATH, a single operator is named by its path
QUERIES: dict[str, tuple[tuple[str, ...], str]] = {
    "q1": ((f"{MOD}.stateless:Q1",), f"{MOD}.stateless:Q1"),
    "q2": ((f"{MOD}.stateless:Q2",), f"{MOD}.stateless:Q2"),
    "q3": ((f"{MOD}.q3:Q3",), f"{MOD}.q3:Q3"),
    "q4": ((f"winners={MOD}.winning:WinningBids", f"q4={MOD}.winning:CategoryAverage"), "winners"),
    "q5": ((f"{MOD}.windows:Q5",), f"{MOD}.windows:Q5"),
    "q6": ((f"winners={MOD}.winning:WinningBids", f"q6={MOD}.winning:SellerAverage"), "winners"),
    "q7": ((f"{MOD}.windows:Q7",), f"{MOD}.windows:Q7"),
    "q8": ((f"{MOD}.q8:Q8",), f"{MOD}.q8:Q8"),
}
MIGRATIONS = ("all-at-once", "batched")


def _spec(ctx: Ctx, label: str, q: str, prefix: str, trigger_ms: int) -> JobSpec:
    from spark_jobs.nexmark import topics

    ops, name = QUERIES[q]
    return JobSpec(job=ctx.name(label), input_topic=topics(prefix), bins=ctx.profile.nexmark_bins,
                   workers=ctx.profile.workers, db_url=ctx.db_url, bootstrap=ctx.bootstrap, run_dir=ctx.run_dir,
                   trigger_ms=trigger_ms, max_offsets_per_trigger=ctx.profile.nexmark_max_offsets, operator=name,
                   operators=ops if len(ops) > 1 else ())


def _writer(ctx: Ctx, prefix: str, rate: float, events: int, label: str, pregenerate: bool,
            send_rate: float | None = None) -> tuple[Proc, Path]:
    """bench.nexmark.writer in its own process; returns once its schedule (t0) is fixed."""
    ensure_topics({t: 2 for t in kind_topics(prefix).values()}, ctx.bootstrap)
    sched = ctx.run_dir / "data" / f"{label}.nexmark.json"
    sched.parent.mkdir(parents=True, exist_ok=True)
    p = Proc([PY, "-m", "bench.nexmark.writer", "--bootstrap", ctx.bootstrap, "--topic-prefix", prefix,
              "--partitions", str(PARTITIONS), "--rate", str(rate), "--events", str(events), "--seed", "0",
              "--schedule-out", str(sched), *(["--pregenerate"] if pregenerate else []),
              *(["--send-rate", str(send_rate)] if send_rate else [])],
             ctx.run_dir / "logs" / f"{label}.writer.log", "NEXMark writer").start()
    # pregeneration runs before t0 (~20k events per CPU-second)
    wait_until(sched.exists, 120 + events / 5000, "the NEXMark writer's schedule", poll=0.5, proc=p)
    return p, sched


def _writer_stats(sched: Path) -> dict[str, Any]:
    return json.loads(sched.read_text()).get("stats", {})


def _state(job: BallastJob) -> dict[str, float]:
    """The migrated operator's state at its last epoch: keys and bytes summed over the workers."""
    last = job.last_epoch()
    ws = job.worker_rows([last]) if last >= 0 else []
    return {"state_keys": float(sum(w.state_keys or 0 for w in ws)),
            "state_mb": sum(w.state_bytes or 0 for w in ws) / 2**20}


def _latencies(clock: OffsetClock, spec: JobSpec, ends: dict[str, dict[int, dict[int, int]]],
               answered: dict[int, float]) -> tuple[np.ndarray, np.ndarray]:
    """(answer time, latency ms) of every input record the migrated operator read."""
    t_out, lat = [], []
    for topic, known in ends.items():
        for e, parts in offset_ranges(spec.operator_checkpoint_dir, topic, known).items():
            if e not in answered:
                continue
            for p, (lo, hi) in parts.items():
                s = clock.times_s(topic, p, lo, hi)
                if s.size:
                    t_out.append(np.full(s.size, answered[e]))
                    lat.append((answered[e] - s) * 1000.0)
    if not t_out:
        return np.array([]), np.array([])
    return np.concatenate(t_out), np.concatenate(lat)


def migration_rate(ctx: Ctx, q: str, cost: dict[str, Any]) -> float:
    """The open-loop rate of query q's migrations: the profile's, or (None) 0.6 × the events/s its
    Ballast job sustained on the backlog, capped by `nexmark_max_rate` (what the writer holds): the
    state grows with the rate, so this is the largest state the machine holds with headroom."""
    P = ctx.profile
    if P.nexmark_rate:
        return float(P.nexmark_rate)
    sustained = (cost.get(q) or {}).get("ballast", {}).get("events_per_s", math.nan)
    return float(min(P.nexmark_max_rate, 0.6 * sustained)) if sustained == sustained else float(P.nexmark_max_rate)


def migration_session(ctx: Ctx, q: str, rate: float) -> dict[str, Any]:
    P = ctx.profile
    label = f"nxm-{q}"
    prefix = ctx.name(label)
    # a larger cap than the cost run's: the job catches up on what the writer sent during its start
    spec = replace(_spec(ctx, label, q, prefix, P.trigger_ms), max_offsets_per_trigger=4 * P.nexmark_max_offsets)
    ensure_topics({t: 2 for t in kind_topics(prefix).values()}, ctx.bootstrap)  # before the job subscribes
    job = BallastJob(spec).start()
    log = ctx.run_dir / "logs" / f"{spec.job}.log"
    wait_until(lambda: log.exists() and QUERY_STARTED in log.read_text(errors="replace"), 300,
               f"{spec.job} to start", proc=job.proc)
    tails = {t: OffsetLogTail(spec.operator_checkpoint_dir, t).start() for t in kind_topics(prefix).values()}
    budget_s = P.nexmark_fill_s + 3 * (P.steady_s + P.settle_s) + 240
    gen, sched_path = _writer(ctx, prefix, rate, int(rate * budget_s), label,
                              P.nexmark_pregenerate)
    migrations: list[dict[str, Any]] = []
    res: dict[str, Any] = {"query": q, "job": spec.job, "operator": spec.operator, "rate": rate,
                           "bins": spec.bins, "workers": spec.workers}
    try:
        time.sleep(P.nexmark_fill_s)
        wait_steady(ctx, job, rate, P.steady_s, timeout_s=120.0)
        _, w, uniform = job.current_map()
        half = half_of_half(uniform, w)
        m = job.migrate(half, "all-at-once", timeout=P.timeouts_s)
        migrations.append({**m, "role": "setup"})
        for i, strat in enumerate(MIGRATIONS):
            wait_steady(ctx, job, rate, P.steady_s + P.settle_s, timeout_s=120.0)
            target = (uniform, half)[i % 2]
            state = _state(job)
            n_moving = sum(1 for a, b in zip(job.current_map()[2], target) if a != b)
            m = job.migrate(target, strat, batch_bins=max(1, math.ceil(n_moving / P.batch_steps)),
                            timeout=P.timeouts_s)
            migrations.append({**m, **state, "role": "measured"})
            ctx.log(f"[nexmark {q}] {strat}: {m['steps']} steps, {m['bins']} bins, {m['keys_moved']} keys "
                    f"(state {state['state_keys']:.0f} keys, {state['state_mb']:.1f} MB) in {m['duration_s']:.1f}s")
        time.sleep(P.settle_s + 2)
    finally:
        gen.stop(timeout=60)
        job.stop()
        ends = {t: tail.stop() for t, tail in tails.items()}
    res["writer"] = _writer_stats(sched_path)
    epochs = job.epochs()
    answered = {e.epoch: unix(e.ended_at) for e in epochs}
    t_out, lat = _latencies(OffsetClock(NexmarkSchedule.load(sched_path)), spec, ends, answered)
    res["records_measured"] = int(lat.size)
    rows = []
    for m in migrations:
        t0, t1 = m["t_emit"], m["t_end"] + P.settle_s
        h, st = LogHistogram(), LogHistogram()
        h.record(lat[(t_out >= t0) & (t_out < t1)])
        st.record(lat[(t_out >= t0 - P.steady_s) & (t_out < t0)])
        ends_at = sorted(unix(e.ended_at) for e in epochs if t0 - 5 <= unix(e.ended_at) <= t1 + 5)
        gaps = [b - a for a, b in zip(ends_at, ends_at[1:]) if b >= t0]
        rows.append({"query": q, "strategy": m["strategy"] if m["role"] == "measured" else "setup (all-at-once)",
                     "role": m["role"], "steps": m["steps"], "bins_moved": m["bins"], "keys_moved": m["keys_moved"],
                     "mb_moved": m["bytes_moved"] / 2**20, "state_keys": m.get("state_keys", math.nan),
                     "state_mb": m.get("state_mb", math.nan), "duration_s": m["duration_s"],
                     "max_latency_ms": h.max if h.total else math.nan, "p99_latency_ms": h.percentile(99),
                     "records_in_window": h.total, "steady_p99_ms": st.percentile(99),
                     "steady_max_ms": st.max if st.total else math.nan,
                     "move_ms_max_step": m["move_ms_max_step"], "max_epoch_gap_s": max(gaps) if gaps else math.nan})
    res["migrations"] = rows
    steady = [e.batch_ms for e in epochs if e.input_rows and unix(e.ended_at) > migrations[0]["t_emit"] - P.steady_s]
    res["median_batch_ms"] = statistics.median(steady) if steady else math.nan
    return res


def exp_nexmark(ctx: Ctx) -> dict[str, Any]:
    P = ctx.profile
    out = ctx.run_dir / "nexmark"
    out.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"migration": {}, "cost": {}}
    # cost: one backlog, every query under both systems, back to back, in paired rounds (nexmark_cost.py)
    prefix = ctx.name("nxc")
    gen, sched = _writer(ctx, prefix, P.nexmark_backlog_event_rate, P.nexmark_backlog_events, "nxc", True,
                         send_rate=P.nexmark_backlog_rate)
    if gen.wait(timeout=P.timeouts_s) != 0:
        raise RuntimeError(f"the backlog writer failed:\n{gen.tail()}")
    events = int(_writer_stats(sched).get("sent", P.nexmark_backlog_events))
    res["cost"], errors = run_cost(ctx, prefix, events,
                                   lambda label, q: _spec(ctx, label, q, prefix, P.nexmark_cost_trigger_ms))
    res["backlog_events"] = events
    for q in P.nexmark_migration_queries:
        try:
            res["migration"][q] = migration_session(ctx, q, migration_rate(ctx, q, res["cost"]))
        except Exception:  # noqa: BLE001
            errors.append(f"migration {q}:\n{traceback.format_exc()}")
    res["errors"] = "\n".join(errors)
    res["summary"] = summarize(res)
    _write_files(ctx, res, out)
    return res


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    """What summary.json keeps under `nexmark` (shapes the smoke test checks)."""
    mig: dict[str, Any] = {}
    for q, r in res["migration"].items():
        meas = {m["strategy"]: m for m in r["migrations"] if m["role"] == "measured"}
        d = {k: {s: meas[s][k] for s in meas} for k in
             ("max_latency_ms", "duration_s", "p99_latency_ms", "steady_p99_ms", "steady_max_ms", "keys_moved",
              "mb_moved", "bins_moved", "steps", "state_keys", "state_mb", "move_ms_max_step", "max_epoch_gap_s")}
        aao, bat = meas.get("all-at-once", {}), meas.get("batched", {})
        d["max_latency_ratio_all_at_once_over_batched"] = (aao.get("max_latency_ms", math.nan)
                                                           / bat.get("max_latency_ms", math.nan))
        d["duration_ratio_batched_over_all_at_once"] = bat.get("duration_s", math.nan) / aao.get("duration_s", math.nan)
        d.update({"rate": r["rate"], "bins": r["bins"], "workers": r["workers"], "writer": r.get("writer", {}),
                  "median_batch_ms": r["median_batch_ms"]})
        mig[q] = d
    cost = {q: {k: c[k] for k in ("ballast_ms_per_event", "native_ms_per_event", "ratio", "native_error")}
            | {"ratios": c.get("ratios", [c["ratio"]]),
               "ballast_events_per_s": c["ballast"]["events_per_s"], "native_events_per_s": c["native"].get(
               "events_per_s", math.nan), "critical_path": c["ballast"].get("critical_path", {})}
            for q, c in res["cost"].items()}
    return {"migration": mig, "cost": cost, "backlog_events": res.get("backlog_events")}


def _write_files(ctx: Ctx, res: dict[str, Any], out: Path) -> None:
    mig_rows = [m for r in res["migration"].values() for m in r["migrations"]]
    cost_rows = [{"query": q, **{f"ballast_{k}": v for k, v in c["ballast"].items()},
                  **{f"native_{k}": v for k, v in c["native"].items()}, "ratio": c["ratio"]}
                 for q, c in res["cost"].items()]
    rp.write_csv(out / "migrations.csv", mig_rows)
    rp.write_csv(out / "cost.csv", cost_rows)
    s = res["summary"]
    meas = [m for m in mig_rows if m["role"] == "measured"]
    if meas:
        rp.plot_bars(out / "migration.png", [f"{m['query']} {m['strategy']}" for m in meas],
                     {"max latency ms": [m["max_latency_ms"] for m in meas],
                      "duration s": [m["duration_s"] for m in meas]},
                     "NEXMark: all-at-once vs batched, open loop")
    if cost_rows:
        rp.plot_bars(out / "cost.png", [r["query"] for r in cost_rows],
                     {"Ballast ms/event": [r["ballast_ms_per_event"] for r in cost_rows],
                      "native ms/event": [r["native_ms_per_event"] for r in cost_rows],
                      "Ballast / native": [r["ratio"] for r in cost_rows]},
                     f"NEXMark cost per event, backlog of {res.get('backlog_events')} events")
    (out / "README.md").write_text(
        "# NEXMark (issue 10)\n\n" + report_section(s) + "\n\nEvery migration (set-up included):\n\n"
        + rp.md_table(mig_rows, ["query", "strategy", "steps", "bins_moved", "keys_moved", "mb_moved", "state_keys",
                                 "duration_s", "max_latency_ms", "p99_latency_ms", "steady_p99_ms",
                                 "move_ms_max_step", "max_epoch_gap_s"])
        + "\n\n![](migration.png)\n\n![](cost.png)\n")
    (out / "result.json").write_text(json.dumps(rp.clean(res), indent=1))


def report_section(s: dict[str, Any]) -> str:
    """The report's NEXMark tables (bench/run.py's REPORT.md and the experiment's README)."""
    mig = [{"query": q, "events/s": d["rate"], "state_keys": d["state_keys"].get("all-at-once"),
            "keys_moved": d["keys_moved"].get("all-at-once"),
            "all-at-once max ms": d["max_latency_ms"].get("all-at-once"),
            "batched max ms": d["max_latency_ms"].get("batched"),
            "all-at-once s": d["duration_s"].get("all-at-once"), "batched s": d["duration_s"].get("batched"),
            "batched steps": d["steps"].get("batched"), "steady p99 ms": d["steady_p99_ms"].get("all-at-once"),
            "max latency ratio": d["max_latency_ratio_all_at_once_over_batched"]}
           for q, d in (s.get("migration") or {}).items()]
    cost = [{"query": q, "Ballast ms/event": c["ballast_ms_per_event"], "native ms/event": c["native_ms_per_event"],
             "Ballast / native": c["ratio"],
             "rounds' ratios": ", ".join(f"{x:.2f}" for x in c.get("ratios") or []),
             "native note": c.get("native_error") or "",
             "critical path (CP, critical ms per epoch)": "; ".join(
                 f"{op}: {brief(cp)}" for op, cp in (c.get("critical_path") or {}).items())}
            for q, c in (s.get("cost") or {}).items()]
    return ("Migration (all-at-once vs batched, the same bins; latency = epoch end − scheduled time):\n\n"
            + rp.md_table(mig, ["query", "events/s", "state_keys", "keys_moved", "steady p99 ms", "all-at-once max ms",
                                "batched max ms", "all-at-once s", "batched steps", "batched s", "max latency ratio"])
            + f"\n\nCost per event, the same backlog of {s.get('backlog_events')} events (Ballast ÷ Spark's own "
            "operators; each side's median ms/event and the median of the paired rounds' own ratios):\n\n"
            + rp.md_table(cost, ["query", "Ballast ms/event", "native ms/event", "Ballast / native", "rounds' ratios",
                                 "native note",
                                 "critical path (CP, critical ms per epoch)"])
            + "\n\nThe critical path is that of the Ballast job's data epochs, per operator: each activity's "
            "critical participation and its critical ms per epoch (bench.cp_summary, docs/tracing.md).")
