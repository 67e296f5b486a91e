"""Experiment `spike` (issue 13, item 3): the migration spike at a real state size.

One job (`bench.padded:PaddedCount`: key-count whose state value per key is `value_bytes` long) with
GBs of state under open-loop load. The migrations go from the uniform map to `swap_half` (every other
bin changes worker: half of the state moves, in both directions) and back, alternating direction as
`migration_session` does; no set-up migration. Strategies: all-at-once, batched (`batch_steps`
steps back to back), batched-gap (the same, `gap_s` apart), batched with pre-copy (each step warmed
for an epoch at its new owner first, steps sent one after the other, see `BallastJob.migrate`), fluid
(one bin per step). Per strategy: max latency, duration, bytes
moved, the steps' pauses (`checkpoints.migration_ms` of each step); the goal ratios
all-at-once / batched max latency and batched max latency / steady p99 (summary.json → `spike`).

After the job stopped, the all-at-once move's bins are read again from the durable state (no LMDB
write) per receiving worker: how much of its pause is the read of the durable Arrow state.

`python -m bench.run --full --only spike`; smoke: `--smoke --only spike` (not in the smoke profile
that `make test` runs). Sizes: SPIKE_SMOKE / SPIKE_FULL, overridable with
`--set 'extra={"spike": {"keys": 500000}}'`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import report as rp
from bench.experiments.common import Ctx, own_profile, session_result
from bench.experiments.migration import migration_session
from bench.padded import ENV as VALUE_BYTES_ENV

# fluid last: the bins' durable state grows with every epoch since the prefill (no snapshots), the
# longest strategy adds most of it
STRATEGIES = ("all-at-once", "batched", "batched-gap", "batched-precopy", "fluid")


@dataclass
class SpikeProfile:
    keys: int = 60_000
    value_bytes: int = 1024  # the state value per key (count + padding); the store key adds ~20 bytes
    bins: int = 64
    rate: float = 1000.0  # open-loop rows/s
    trigger_ms: int = 500
    max_offsets: int = 50_000  # maxOffsetsPerTrigger: the prefill's catch-up epochs
    steady_s: float = 5.0
    settle_s: float = 3.0
    batch_steps: int = 8
    gap_s: float = 2.0  # batched-gap: seconds between steps
    strategies: tuple[str, ...] = STRATEGIES
    # epochs with changes between snapshots of the durable state: a snapshot writes each worker's
    # whole state (GBs here), so the run takes none (rebuilds read the prefill's changelogs)
    snapshot_every: int = 1_000_000
    fluid_max_steps: int | None = None  # None: fluid runs to the end
    timeout_s: float = 900.0


SPIKE_SMOKE = SpikeProfile()
# 2.2 M keys x 1 KiB: ~2.3 GB of state; swap_half moves ~1.15 GB. 32 batched steps of ~36 MB: spike-2's 16
# steps of ~72 MB paused 0.6-1.3 s each (a receiver loads ~36 MB of it), and back to back their epochs
# (2-3 s) outran the 500 ms trigger. batched-gap: the same steps gap_s apart, so the job catches up
# between them. Measurements: bench/REPORT.md §8.
SPIKE_FULL = SpikeProfile(keys=2_200_000, value_bytes=1024, bins=256, rate=2000.0, max_offsets=200_000,
                          steady_s=15.0, settle_s=4.0, batch_steps=32, timeout_s=3600.0)


def profile_for(ctx: Ctx) -> SpikeProfile:
    return own_profile(ctx, "spike", SPIKE_SMOKE, SPIKE_FULL)


def swap_half(assignment: list[int], workers: int) -> list[int]:
    """Every other bin to the next worker: half of every worker's bins (and state) move."""
    return [(w + 1) % workers if b % 2 == 0 else w for b, w in enumerate(assignment)]


def exp_spike(ctx: Ctx) -> dict[str, Any]:
    S = profile_for(ctx)
    load_start = os.getloadavg()
    P = dataclasses.replace(ctx.profile, rate=S.rate, trigger_ms=S.trigger_ms, steady_s=S.steady_s,
                            settle_s=S.settle_s, catchup_max_offsets=S.max_offsets, batch_steps=S.batch_steps,
                            gap_s=S.gap_s,
                            timeouts_s=S.timeout_s, workers=2)
    sub = dataclasses.replace(ctx, profile=P)
    ctx.log(f"[spike] {S.keys} keys x {S.value_bytes} B, B={S.bins}, {S.rate:.0f} rows/s; load {load_start}")
    spec_extra = {"operator": "padded", "operator_path": "bench.padded:PaddedCount",
                  "env": {VALUE_BYTES_ENV: str(S.value_bytes)},
                  "extra_args": ("--snapshot-every", str(S.snapshot_every)), "log_level": "DEBUG"}
    r = migration_session(sub, "spike", S.bins, S.keys, S.strategies, max_steps=S.fluid_max_steps,
                          spec_extra=spec_extra, target_of=swap_half, setup=False, clean_steady=True)
    load_end = os.getloadavg()
    r["state"] = state_size(ctx, r)
    r["phases"] = cutover_phases(ctx, r)
    try:
        r["durable_read"] = durable_read_time(ctx, r, S.bins)
    except Exception as exc:  # noqa: BLE001 - the breakdown is extra; the figures stand without it
        r["durable_read"] = {"error": repr(exc)}
    r["loadavg_start"], r["loadavg_end"] = list(load_start), list(load_end)
    free = shutil.disk_usage(ctx.run_dir)
    r["disk_free_gb_end"] = free.free / 1e9
    summary = summarize(S, r)
    return session_result(ctx, "spike", r, summary, readme(summary))


def state_size(ctx: Ctx, r: dict[str, Any], operator: str = "padded") -> dict[str, Any]:
    """The job's state at its largest (sum over workers of the last report of each epoch)."""
    from ballast.store import JobStore

    eps = [e["epoch"] for e in r["epochs"]]
    rows = JobStore(ctx.db_url, r["job"], operator).worker_window(eps)
    by_epoch: dict[int, dict[int, tuple[int, int]]] = {}
    for w in rows:
        by_epoch.setdefault(w.epoch, {})[w.worker] = (w.state_keys, w.state_bytes)
    full = [(sum(k for k, _ in d.values()), sum(b for _, b in d.values())) for d in by_epoch.values() if len(d) >= 2]
    keys, nbytes = max(full, key=lambda x: x[1], default=(0, 0))
    return {"keys": keys, "bytes": nbytes}


def cutover_phases(ctx: Ctx, r: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The runner's DEBUG phases (apply = pre-apply + the epoch's Spark job, db, acks) of each
    measured migration's slowest epoch, by strategy."""
    from ballast.store import JobStore
    from bench.cluster.local import epoch_phases

    ph = epoch_phases(ctx.run_dir / "logs" / f"{r['job']}.log")
    out = {}
    for m in r["migrations"]:
        if m["role"] != "measured":
            continue
        inside = [e for e in r["epochs"] if m["t_emit"] <= e["ended_at"] <= m["t_end"] + 1]
        if not inside:
            continue
        worst = max(inside, key=lambda e: e["batch_ms"])
        tasks = JobStore(ctx.db_url, r["job"], "padded").worker_window([worst["epoch"]])
        out[m["strategy"]] = {"epoch": worst["epoch"], "batch_ms": worst["batch_ms"],
                              "input_rows": worst["input_rows"], **ph.get(worst["epoch"], {}),
                              "task_wall_ms_max": max((w.wall_ms for w in tasks), default=math.nan),
                              "task_useful_ms_max": max((w.useful_ms for w in tasks), default=math.nan)}
    return out


def durable_read_time(ctx: Ctx, r: dict[str, Any], bins: int) -> dict[str, Any]:
    """Re-read the all-at-once move's bins from the durable state as of the epoch before its cut-over,
    grouped by receiving worker, without writing them anywhere: the read share of the move's pause.
    The files were written minutes before, so they are likely in the page cache (as at the cut-over)."""
    from spark_jobs.durable import BinSource, DurableState

    m = next((x for x in r["migrations"] if x["strategy"] == "all-at-once" and x["role"] == "measured"), None)
    if m is None or not m.get("applied_epochs"):
        return {}
    cut = m["applied_epochs"][0]
    ds = DurableState(str(ctx.run_dir / "ckpt" / r["job"] / "state"), r["job"], bins)
    h = ds.history(before=cut)
    at = {e.epoch: e.map_version for e in ds.entries}
    before, after = ds.maps[at[max(e for e in at if e < cut)]], ds.maps[at[cut]]
    by_dst: dict[int, list[int]] = {}
    for b, (a, z) in enumerate(zip(before, after)):
        if a != z:
            by_dst.setdefault(z, []).append(b)
    res: dict[str, Any] = {"cutover_epoch": cut, "workers": {}}
    for w, bs in sorted(by_dst.items()):
        src = BinSource(h)
        t0 = time.perf_counter()
        nkeys = nbytes = 0
        try:
            for b in bs:
                _, batches = src.full(b, cut - 1)
                for keys, values in batches:
                    nkeys += len(keys)
                    nbytes += sum(len(k) for k in keys) + sum(len(v) for v in values if v is not None)
        finally:
            src.close()
        res["workers"][str(w)] = {"bins": len(bs), "keys": nkeys, "bytes": nbytes,
                                  "read_ms": (time.perf_counter() - t0) * 1000}
    res["read_ms_max"] = max((v["read_ms"] for v in res["workers"].values()), default=math.nan)
    return res


def ratio(a: Any, b: Any) -> float:
    """a / b, NaN when either is missing or b is 0 (the summaries' goal ratios)."""
    try:
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        return math.nan
    return a / b if b and a == a and b == b else math.nan


def summarize(S: SpikeProfile, r: dict[str, Any]) -> dict[str, Any]:
    """summary.json → `spike` from a finished session (pure: tests/bench feed it recorded rows)."""
    meas = [m for m in r.get("migrations", []) if m["role"] == "measured"]
    by = {m["strategy"]: m for m in meas}

    def col(k: str) -> dict[str, Any]:
        return {s: m.get(k) for s, m in by.items()}

    steady = (r.get("steady") or {}).get("p99_ms", math.nan)
    ml = col("max_latency_ms")
    s: dict[str, Any] = {
        "profile": asdict(S), "state_keys": (r.get("state") or {}).get("keys"),
        "state_bytes": (r.get("state") or {}).get("bytes"), "steady_p99_ms": steady,
        "max_latency_ms": ml, "p99_latency_ms": col("p99_latency_ms"), "duration_s": col("duration_s"),
        "bytes_moved": col("bytes_moved"), "state_bytes_moved": col("state_bytes_moved"),
        "keys_moved": col("keys_moved"), "bins_moved": col("bins_moved"),
        "steps": col("steps"), "step_ms": col("step_ms"), "step_ms_max": col("move_ms_max_step"),
        "max_epoch_batch_ms": col("max_epoch_batch_ms"), "max_epoch_gap_s": col("max_epoch_gap_s"),
        "steady_p99_before_ms": col("steady_p99_ms"),
        "catchup": r.get("catchup", {}), "prefill_s": r.get("prefill_s"),
        "cutover_phases": r.get("phases", {}), "durable_read": r.get("durable_read", {}),
        "loadavg_start": r.get("loadavg_start"), "loadavg_end": r.get("loadavg_end"),
        "disk_free_gb_end": r.get("disk_free_gb_end"),
    }
    s["all_at_once_over_batched"] = ratio(ml.get("all-at-once"), ml.get("batched"))
    s["batched_max_over_steady_p99"] = ratio(ml.get("batched"), steady)
    s["batched_precopy_max_over_steady_p99"] = ratio(ml.get("batched-precopy"), steady)
    s["all_at_once_over_batched_precopy"] = ratio(ml.get("all-at-once"), ml.get("batched-precopy"))
    s["max_over_steady_p99"] = {k: ratio(v, steady) for k, v in ml.items()}
    s["all_at_once_over"] = {k: ratio(ml.get("all-at-once"), v) for k, v in ml.items() if k != "all-at-once"}
    aao, bat = s["all_at_once_over_batched"], s["batched_max_over_steady_p99"]
    moved = by.get("all-at-once", {}).get("state_bytes_moved") or by.get("all-at-once", {}).get("bytes_moved") or 0
    s["goals"] = {"all_at_once_moved_ge_1gb": moved >= 1e9,
                  "all_at_once_over_batched_ge_10": bool(aao >= 10) if aao == aao else None,
                  "batched_max_over_steady_p99_le_1_5": bool(bat <= 1.5) if bat == bat else None}
    return s


def fmt(v: Any, spec: str = ",.0f") -> str:
    """A figure for a README, "–" when it is missing."""
    try:
        return format(float(v), spec) if v is not None and float(v) == float(v) else "–"
    except (TypeError, ValueError):
        return "–"


def readme(s: dict[str, Any]) -> str:
    p = s["profile"]
    rows = []
    for k in s["max_latency_ms"]:
        steps = s["step_ms"].get(k) or []
        rows.append({"strategy": k, "steps": s["steps"].get(k), "bins": s["bins_moved"].get(k),
                     "state MB moved": fmt((s.get("state_bytes_moved", {}).get(k) or 0) / 1e6),
                     "MB replayed": fmt((s["bytes_moved"].get(k) or 0) / 1e6),
                     "duration s": fmt(s["duration_s"][k], ".1f"),
                     "max latency ms": fmt(s["max_latency_ms"][k]), "p99 ms": fmt(s["p99_latency_ms"].get(k)),
                     "steady p99 before ms": fmt(s["steady_p99_before_ms"].get(k)),
                     "step pause ms max / median": f"{fmt(max(steps, default=math.nan))} / "
                                                   f"{fmt(sorted(steps)[len(steps) // 2] if steps else math.nan)}",
                     "longest epoch ms": fmt(s["max_epoch_batch_ms"].get(k)),
                     "longest epoch gap s": fmt(s["max_epoch_gap_s"].get(k), ".2f")})
    cols = list(rows[0]) if rows else []
    dr = s.get("durable_read") or {}
    ph = s.get("cutover_phases") or {}
    g = s["goals"]
    return "\n".join([
        f"# Spike at a real state size: {p['keys']:,} keys x {p['value_bytes']} B, B={p['bins']}, W=2", "",
        f"State at its largest: {fmt((s['state_bytes'] or 0) / 1e9, '.2f')} GB in {fmt(s['state_keys'])} keys. "
        f"Open-loop {p['rate']:.0f} rows/s, trigger {p['trigger_ms']} ms; migrations uniform ↔ every other bin "
        f"swapped (half the state moves), alternating direction; batched = {p['batch_steps']} steps back to back; "
        f"batched-gap = the same steps {p.get('gap_s')} s apart; "
        f"batched-precopy = the same steps, each warmed one epoch first. Load average at start "
        f"{s['loadavg_start']}, at end {s['loadavg_end']}.", "",
        rp.md_table(rows, cols), "",
        f"Steady p99 (the windows before each migration): **{fmt(s['steady_p99_ms'])} ms**. "
        f"all-at-once / batched max latency: **{fmt(s['all_at_once_over_batched'], '.2f')}×** (goal ≥ 10: "
        f"{g['all_at_once_over_batched_ge_10']}); batched max / steady p99: "
        f"**{fmt(s['batched_max_over_steady_p99'], '.2f')}** (goal ≤ 1.5: {g['batched_max_over_steady_p99_le_1_5']}); "
        "Max latency ÷ steady p99 by strategy: "
        + ", ".join(f"{k} {fmt(v, '.2f')}" for k, v in (s.get("max_over_steady_p99") or {}).items())
        + "; all-at-once ÷ each: "
        + ", ".join(f"{k} {fmt(v, '.2f')}×" for k, v in (s.get("all_at_once_over") or {}).items()) + ".", "",
        "Each strategy's slowest epoch, runner phases (ms): "
        + "; ".join(f"{k}: epoch {v.get('epoch')} {fmt(v.get('batch_ms'))} (apply {fmt(v.get('apply_ms'))}, "
                    f"db {fmt(v.get('db_ms'))}, acks {fmt(v.get('acks_ms'))}, "
                    f"slowest task {fmt(v.get('task_wall_ms_max'))}, "
                    f"{v.get('input_rows')} rows)"
                    for k, v in ph.items()) + ".", "",
        "All-at-once move, the durable read alone (bins re-read per receiving worker after the run): "
        + ("; ".join(f"worker {w}: {v['bins']} bins, {fmt(v['bytes'] / 1e6)} MB in {fmt(v['read_ms'])} ms"
                     for w, v in (dr.get("workers") or {}).items()) or str(dr.get("error", "not measured"))) + ".",
        "", f"Catch-up of the prefill: {fmt((s['catchup'] or {}).get('rows_per_s'))} rows/s.", "",
        "![timeline](latency_timeline.png)\n\n![ccdf](latency_ccdf.png)\n\n![bars](strategies.png)\n",
    ])
