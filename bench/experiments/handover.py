"""Experiment `handover` (issue 24): moving a windowed operator's bins by handover, against a
transfer and a pre-copy of the same bins, at a windowed state large enough for a transfer's pause
to show.

One job (`bench.padded_windows:StaggeredWindows`: a count per key and tumbling event-time window whose
state per (key, window) is `value_bytes` long, each key's windows shifted by a phase of its own so
that windows close spread over the window's length; `staggered=False`: `PaddedWindows`, every key's
window closing at one instant, as run handover-full-1 measured) under open-loop load; no prefill: its state is the
open windows the load builds, so the first measured migration waits `window_ms` plus the lateness
of load first. The migrations go from the uniform map to `swap_half` (every other bin changes
worker) and back, alternating, one per strategy: all-at-once (a transfer: the new owners load the
bins' durable state at the cut-over), handover (the same step with `handover: true`: nothing
moves; it applies once the old owners' last windows closed), batched-precopy (the same bins in
`batch_steps` steps, each warmed for an epoch first). A record's latency runs from its scheduled
time to the commit of the epoch that processed it (a windowed operator answers only when a window
closes, so the last output of an epoch is not its answer time).

summary.json → `handover`: `max_over_steady_p99` (the handover's max latency over the steady p99,
goal ≤ 1.1), `bytes_moved` (what the data plane counted for the handover's step: goal 0),
`transfer_max_over_steady_p99` and `precopy_max_over_steady_p99` (the same run's comparisons),
`state_bytes`: the open windows at their largest before the first migration (goal ≥ 500 MB in the
full profile; a handover's overlap holds the moved bins' windows on both owners, which a largest
over the whole run would count twice).

`python -m bench.run --full --only handover`; smoke: `--smoke --only handover` (not in the smoke
run `make test` starts). Sizes: HANDOVER_SMOKE / HANDOVER_FULL, or
`--set 'extra={"handover": {"rate": 1500}}'`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bench import report as rp
from bench.experiments.common import Ctx, own_profile, session_result
from bench.experiments.migration import migration_session
from bench.experiments.spike import fmt, ratio, state_size, swap_half
from bench.padded import ENV as VALUE_BYTES_ENV
from bench.padded_windows import LATENESS_MS, WINDOW_ENV

STRATEGIES = ("all-at-once", "handover", "batched-precopy")
OPERATOR = "windows"


@dataclass
class HandoverProfile:
    keys: int = 20_000  # the load's key space (uniform)
    value_bytes: int = 1024  # state per (key, window)
    window_ms: int = 20_000
    bins: int = 64
    rate: float = 1000.0  # open-loop rows/s
    trigger_ms: int = 500
    max_offsets: int = 20_000
    steady_s: float = 5.0
    settle_s: float = 3.0
    batch_steps: int = 8
    strategies: tuple[str, ...] = STRATEGIES
    snapshot_every: int = 1_000_000  # a snapshot writes each worker's whole state: none in the run
    staggered: bool = True  # each key's windows on a grid of its own (closes spread over the window)
    timeout_s: float = 900.0


HANDOVER_SMOKE = HandoverProfile()
# 1 000 rows/s over 1 M keys: ~86 k keys per 90 s window, 12 KB each: ~580 MB of open windows, at half
# the rate of run handover-full-1 (2 000 rows/s, 3 KB, 120 s) so that the job keeps headroom on 2 cores
# beside the load generator (itself ~half a core at 2 000 rows/s): a saturated job's latency grows
# with its backlog, and no ratio to its steady p99 means anything then. The steady phase lasts about
# as long as the handover's overlap (90 s), so its p99 is not that of a few epochs
HANDOVER_FULL = HandoverProfile(keys=1_000_000, value_bytes=12288, window_ms=90_000, bins=128, rate=1000.0,
                                max_offsets=100_000, steady_s=90.0, settle_s=5.0, timeout_s=3600.0)


def profile_for(ctx: Ctx) -> HandoverProfile:
    return own_profile(ctx, "handover", HANDOVER_SMOKE, HANDOVER_FULL)


def exp_handover(ctx: Ctx) -> dict[str, Any]:
    S = profile_for(ctx)
    load_start = os.getloadavg()
    P = dataclasses.replace(ctx.profile, rate=S.rate, trigger_ms=S.trigger_ms, steady_s=S.steady_s,
                            settle_s=S.settle_s, catchup_max_offsets=S.max_offsets, batch_steps=S.batch_steps,
                            timeouts_s=S.timeout_s, workers=2)
    sub = dataclasses.replace(ctx, profile=P)
    ctx.log(f"[handover] {S.keys} keys, {S.window_ms / 1000:.0f} s windows x {S.value_bytes} B, B={S.bins}, "
            f"{S.rate:.0f} rows/s; load {load_start}")
    op = "StaggeredWindows" if S.staggered else "PaddedWindows"
    spec_extra = {"operator": OPERATOR, "operator_path": f"bench.padded_windows:{op}",
                  "env": {VALUE_BYTES_ENV: str(S.value_bytes), WINDOW_ENV: str(S.window_ms)},
                  "extra_args": ("--snapshot-every", str(S.snapshot_every))}
    r = migration_session(sub, "handover", S.bins, S.keys, S.strategies, spec_extra=spec_extra, target_of=swap_half,
                          setup=False, clean_steady=True, prefill=False, warm_s=(S.window_ms + LATENESS_MS) / 1000,
                          answer_at_commit=True, names=("padded windows", "migration"))
    first = min((m["t_emit"] for m in r.get("migrations", []) if m["role"] == "measured"), default=float("inf"))
    r["state"] = state_size(ctx, {**r, "epochs": [e for e in r["epochs"] if e["ended_at"] < first]}, OPERATOR)
    r["loadavg_start"], r["loadavg_end"] = list(load_start), list(os.getloadavg())
    summary = summarize(S, r)
    return session_result(ctx, "handover", r, summary, readme(summary))


def summarize(S: HandoverProfile, r: dict[str, Any]) -> dict[str, Any]:
    """summary.json → `handover` from a finished session (pure: tests/bench feed it recorded rows)."""
    by = {m["strategy"]: m for m in r.get("migrations", []) if m["role"] == "measured"}
    steady = (r.get("steady") or {}).get("p99_ms")
    ml = {k: m.get("max_latency_ms") for k, m in by.items()}
    ho = by.get("handover", {})
    s: dict[str, Any] = {
        "profile": asdict(S), "state_keys": (r.get("state") or {}).get("keys"),
        "state_bytes": (r.get("state") or {}).get("bytes"), "steady_p99_ms": steady, "max_latency_ms": ml,
        "p99_latency_ms": {k: m.get("p99_latency_ms") for k, m in by.items()},
        "duration_s": {k: m.get("duration_s") for k, m in by.items()},
        "bytes_moved_by": {k: m.get("bytes_moved") for k, m in by.items()},
        "keys_moved_by": {k: m.get("keys_moved") for k, m in by.items()},
        "bins_moved": {k: m.get("bins_moved") for k, m in by.items()},
        "max_epoch_batch_ms": {k: m.get("max_epoch_batch_ms") for k, m in by.items()},
        "loadavg_start": r.get("loadavg_start"), "loadavg_end": r.get("loadavg_end"),
        "max_over_steady_p99": ratio(ml.get("handover"), steady),
        "bytes_moved": ho.get("bytes_moved"),
        "transfer_max_over_steady_p99": ratio(ml.get("all-at-once"), steady),
        "precopy_max_over_steady_p99": ratio(ml.get("batched-precopy"), steady),
    }
    # what the routing delivers per input row: 1 outside a handover; in its overlap 1 plus the rows
    # both owners get (spark_jobs.handover.copies_kept sends a staggered tumbling key's rows to one)
    if "t_emit" in ho:
        first = min(m.get("t_emit", ho["t_emit"]) for m in by.values())
        s["overlap"] = window_figures(r, ho["t_emit"], ho["t_end"])
        s["steady"] = window_figures(r, first - S.steady_s, first)
        s["overlap_rows_per_input"] = s["overlap"]["rows_per_input"]
    m = s["max_over_steady_p99"]
    s["goals"] = {"max_over_steady_p99_le_1_1": bool(m <= 1.1) if m == m else None,
                  "bytes_moved_0": ho.get("bytes_moved") == 0 if ho else None,
                  "state_ge_500mb": (s["state_bytes"] or 0) >= 500e6}
    return s


def window_figures(r: dict[str, Any], t0: float, t1: float) -> dict[str, float]:
    """Over the epochs with input that started in [t0, t1) (unix s): the rows the workers received
    (`records_in`, summed) per input row, the median epoch (`batch_ms`) and the median of each epoch's
    largest worker useful time (`useful_ms`: the fold); nan without any epoch."""
    got: dict[int, int] = {}
    useful: dict[int, float] = {}
    for w in r.get("worker_metrics", []):
        e = int(w["epoch"])
        got[e] = got.get(e, 0) + int(w["records_in"])
        useful[e] = max(useful.get(e, 0.0), float(w.get("useful_ms") or 0.0))
    sel = [e for e in r.get("epochs", []) if t0 <= e["started_at"] < t1 and e["input_rows"]]
    rows = sum(int(e["input_rows"]) for e in sel)
    if not rows:
        return {"rows_per_input": math.nan, "batch_ms": math.nan, "max_useful_ms": math.nan}
    fold = [useful[int(e["epoch"])] for e in sel if int(e["epoch"]) in useful]
    return {"rows_per_input": sum(got.get(int(e["epoch"]), 0) for e in sel) / rows,
            "batch_ms": statistics.median(float(e["batch_ms"]) for e in sel),
            "max_useful_ms": statistics.median(fold) if fold else math.nan}


def readme(s: dict[str, Any]) -> str:
    p = s["profile"]
    rows = [{"strategy": k, "bins": s["bins_moved"].get(k), "keys moved": s["keys_moved_by"].get(k),
             "MB moved": fmt((s["bytes_moved_by"].get(k) or 0) / 1e6, ".1f"),
             "duration s": fmt(s["duration_s"].get(k), ".1f"), "max latency ms": fmt(v),
             "p99 ms": fmt(s["p99_latency_ms"].get(k)), "max ÷ steady p99": fmt(ratio(v, s["steady_p99_ms"]), ".2f"),
             "longest epoch ms": fmt(s["max_epoch_batch_ms"].get(k))} for k, v in s["max_latency_ms"].items()]
    g = s["goals"]
    return "\n".join([
        f"# Handover against transfer and pre-copy: {p['window_ms'] / 1000:.0f} s "
        f"{'staggered ' if p.get('staggered') else ''}windows, {p['keys']:,} keys, "
        f"B={p['bins']}, W=2", "",
        f"Open windows at their largest before the migrations: {fmt((s['state_bytes'] or 0) / 1e6)} MB in "
        f"{fmt(s['state_keys'])} keys "
        f"({p['value_bytes']} B per key and window). Open-loop {p['rate']:.0f} rows/s, trigger {p['trigger_ms']} ms; "
        "migrations uniform ↔ every other bin swapped (half the state's owners change), alternating direction; "
        f"latency = scheduled time → the commit of the record's epoch. Load average at start {s['loadavg_start']}, "
        f"at end {s['loadavg_end']}.", "",
        rp.md_table(rows, list(rows[0]) if rows else []), "",
        f"Steady p99: **{fmt(s['steady_p99_ms'])} ms**. Handover max ÷ steady p99: "
        f"**{fmt(s['max_over_steady_p99'], '.2f')}** (goal ≤ 1.1: {g['max_over_steady_p99_le_1_1']}); its step "
        f"moved {s['bytes_moved']} bytes (goal 0: {g['bytes_moved_0']}); transfer (all-at-once) "
        f"{fmt(s['transfer_max_over_steady_p99'], '.2f')}, pre-copy (batched) "
        f"{fmt(s['precopy_max_over_steady_p99'], '.2f')}; state ≥ 500 MB: {g['state_ge_500mb']}.", "",
        *([rp.md_table([{"window": k, "rows received per input row": fmt(s[k]["rows_per_input"], ".3f"),
                         "epoch median ms": fmt(s[k]["batch_ms"]), "fold median ms (largest worker)":
                         fmt(s[k]["max_useful_ms"])} for k in ("steady", "overlap")],
                      ["window", "rows received per input row", "epoch median ms", "fold median ms (largest worker)"]),
           ""] if "overlap" in s else []),
        "![timeline](latency_timeline.png)\n\n![ccdf](latency_ccdf.png)\n",
    ])
