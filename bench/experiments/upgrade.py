"""Experiment `upgrade` (issue 26): a live code upgrade of a stateful processor holding a GB of state,
under open-loop load.

One job runs `bench.padded_proc:PaddedCounter` (version 1: a count per key whose state is padded to
`value_bytes`), prefilled to `keys` keys. Under load it is upgraded to `bench.padded_proc_v2`
(version 2: the state renamed and extended by its StateUpgrade, carried over key by key the first
time version 2 handles it), rolled back to version 1 (the StateUpgrade back), and upgraded again with
a shadow (version 2 beside version 1 for `shadow_epochs` epochs, its outputs compared, then cut over).
Per action: max latency over the records answered from its emission to its checkpoint + `settle_s`,
against the steady p99 of the `steady_s` before it (the migration experiments' windows and latency
analysis: `bench.experiments.migration.migration_session`). After the run, every key's last output
count is compared with the key's input records up to the last committed epoch: the records lost and
doubled (summary.json -> `upgrade`).

`python -m bench.run --full --only upgrade`; smoke: `--smoke --only upgrade` (not in the smoke profile
that `make test` runs). Sizes: UPGRADE_SMOKE / UPGRADE_FULL, overridable with
`--set 'extra={"upgrade": {"keys": 500000}}'`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from bench import report as rp
from bench.ballast_job import BallastJob
from bench.experiments.common import Ctx, own_profile, session_result
from bench.experiments.migration import migration_session
from bench.experiments.spike import fmt, ratio, state_size
from bench.padded import ENV as VALUE_BYTES_ENV

OPERATOR, V1, V2 = "upgrade", "bench.padded_proc:PaddedCounter", "bench.padded_proc_v2:PaddedCounter"
ACTIONS = ("upgrade", "rollback", "shadow-upgrade")


@dataclass
class UpgradeProfile:
    keys: int = 40_000
    value_bytes: int = 1024
    bins: int = 64
    rate: float = 1000.0
    trigger_ms: int = 500
    max_offsets: int = 50_000
    steady_s: float = 5.0
    settle_s: float = 4.0
    shadow_epochs: int = 3
    snapshot_every: int = 1_000_000  # a snapshot writes every worker's whole state: none in the run
    timeout_s: float = 900.0


UPGRADE_SMOKE = UpgradeProfile()
# ~1.1 M keys x 1 KiB: ~1.2 GB of processor state (each key's pickled KeyState: the padding + ~60 B)
UPGRADE_FULL = UpgradeProfile(keys=1_100_000, bins=256, rate=1000.0, max_offsets=100_000, steady_s=15.0,
                              settle_s=5.0, timeout_s=3600.0)


def exp_upgrade(ctx: Ctx) -> dict[str, Any]:
    from ballast.code_version import CodeVersion, ShadowSpec

    S = own_profile(ctx, "upgrade", UPGRADE_SMOKE, UPGRADE_FULL)
    P = dataclasses.replace(ctx.profile, rate=S.rate, trigger_ms=S.trigger_ms, steady_s=S.steady_s,
                            settle_s=S.settle_s, catchup_max_offsets=S.max_offsets, timeouts_s=S.timeout_s, workers=2)
    sub = dataclasses.replace(ctx, profile=P)
    load_start = os.getloadavg()
    ctx.log(f"[upgrade] {S.keys} keys x {S.value_bytes} B, B={S.bins}, {S.rate:.0f} rows/s; load {load_start}")
    codes = {"upgrade": CodeVersion(V2, "2"), "rollback": CodeVersion(V1, "1"),
             "shadow-upgrade": CodeVersion(V2, "2", shadow=ShadowSpec(epochs=S.shadow_epochs, fields=("key", "count")))}

    def act(job: BallastJob, action: str) -> dict[str, Any]:
        m = job.upgrade(action, codes[action], timeout=S.timeout_s)
        ctx.log(f"[upgrade] {action}: applied at epoch {m['epochs'][0]}, {m['duration_s']:.1f} s after emission "
                f"({m.get('reason') or 'no reason'})")
        return m

    spec_extra = {"operator": OPERATOR, "operator_path": V1, "env": {VALUE_BYTES_ENV: str(S.value_bytes)},
                  "extra_args": ("--snapshot-every", str(S.snapshot_every))}
    r = migration_session(sub, "upgrade", S.bins, S.keys, ACTIONS, spec_extra=spec_extra, setup=False,
                          clean_steady=True, act=act, names=("padded counter", "upgrade"))
    r["state"] = state_size(ctx, r, OPERATOR)
    r["counts"] = exactness(ctx, r)
    r["loadavg_start"], r["loadavg_end"] = list(load_start), list(os.getloadavg())
    summary = summarize(S, r)
    return session_result(ctx, "upgrade", r, summary, readme(summary))


def exactness(ctx: Ctx, r: dict[str, Any]) -> dict[str, Any]:
    """Every key's last output count against its input records up to the last committed epoch's end
    offsets: records lost (a count short of them) and doubled (a count past them)."""
    from spark_jobs.offsets import committed_epochs, read_end_offsets
    from spark_jobs.output import read_output, scan_topic

    ckpt = ctx.run_dir / "ckpt" / r["job"] / "spark"
    ends = read_end_offsets(ckpt, committed_epochs(ckpt)[-1]) or {}
    limit = {int(p): int(o) for p, o in ends.get(r["topic"], {}).items()}
    inputs: Counter[str] = Counter()
    for msg in scan_topic(ctx.bootstrap, r["topic"], 900, max_poll_records=20_000):
        if msg.offset < limit.get(msg.partition, 0):
            inputs[msg.key.decode()] += 1
    outs, dups = read_output(ctx.bootstrap, f"{r['job']}.output", timeout_s=900)
    last: dict[str, int] = {}
    for o in outs:  # ordered by (epoch, worker, seq): a key's last output holds its count
        row = json.loads(o.value)
        last[row["key"]] = int(row["count"])
    return count_check(inputs, last) | {"outputs": len(outs), "output_duplicates_dropped": dups}


def count_check(inputs: Counter[str] | dict[str, int], last: dict[str, int]) -> dict[str, Any]:
    """Lost and doubled records from each key's input records and its last output count (pure)."""
    lost = sum(max(0, n - last.get(k, 0)) for k, n in inputs.items())
    doubled = sum(max(0, c - inputs.get(k, 0)) for k, c in last.items())
    return {"keys": len(inputs), "records": sum(inputs.values()), "lost": lost, "doubled": doubled,
            "keys_off": sum(1 for k in set(inputs) | set(last) if inputs.get(k, 0) != last.get(k, 0))}


def summarize(S: UpgradeProfile, r: dict[str, Any]) -> dict[str, Any]:
    """summary.json -> `upgrade` from a finished session (pure: tests/bench feed it recorded rows)."""
    by = {m["strategy"]: m for m in r.get("migrations", []) if m["role"] == "measured"}
    steady = (r.get("steady") or {}).get("p99_ms", math.nan)
    counts = r.get("counts") or {}
    ml = {a: by.get(a, {}).get("max_latency_ms") for a in ACTIONS}
    s: dict[str, Any] = {
        "profile": asdict(S), "state_keys": (r.get("state") or {}).get("keys"),
        "state_bytes": (r.get("state") or {}).get("bytes"), "steady_p99_ms": steady, "max_latency_ms": ml,
        "p99_latency_ms": {a: by.get(a, {}).get("p99_latency_ms") for a in ACTIONS},
        "steady_p99_before_ms": {a: by.get(a, {}).get("steady_p99_ms") for a in ACTIONS},
        "duration_s": {a: by.get(a, {}).get("duration_s") for a in ACTIONS},
        "max_epoch_batch_ms": {a: by.get(a, {}).get("max_epoch_batch_ms") for a in ACTIONS},
        "max_over_steady_p99": ratio(ml["upgrade"], steady),
        "rollback_max_over_steady_p99": ratio(ml["rollback"], steady),
        "shadow_max_over_steady_p99": ratio(ml["shadow-upgrade"], steady),
        "lost": counts.get("lost"), "doubled": counts.get("doubled"), "counts": counts,
        "loadavg_start": r.get("loadavg_start"), "loadavg_end": r.get("loadavg_end"),
    }
    up, back = s["max_over_steady_p99"], s["rollback_max_over_steady_p99"]
    s["goals"] = {"state_ge_1gb": (s["state_bytes"] or 0) >= 1e9,
                  "max_over_steady_p99_le_1_5": bool(up <= 1.5) if up == up else None,
                  "rollback_max_over_steady_p99_le_1_5": bool(back <= 1.5) if back == back else None,
                  "lost_and_doubled_0": counts.get("lost") == 0 and counts.get("doubled") == 0 if counts else None}
    return s


def readme(s: dict[str, Any]) -> str:
    p, c, g = s["profile"], s.get("counts") or {}, s["goals"]
    rows = [{"action": a, "max latency ms": fmt(s["max_latency_ms"][a]), "p99 ms": fmt(s["p99_latency_ms"][a]),
             "steady p99 before ms": fmt(s["steady_p99_before_ms"][a]),
             "longest epoch ms": fmt(s["max_epoch_batch_ms"][a]),
             "emission to checkpoint s": fmt(s["duration_s"][a], ".1f"),
             "max / steady p99": fmt(ratio(s["max_latency_ms"][a], s["steady_p99_ms"]), ".2f")} for a in ACTIONS]
    return "\n".join([
        f"# Live code upgrade at a real state size: {p['keys']:,} keys x {p['value_bytes']} B, B={p['bins']}, W=2", "",
        f"State at its largest: {fmt((s['state_bytes'] or 0) / 1e9, '.2f')} GB in {fmt(s['state_keys'])} keys. "
        f"Open-loop {p['rate']:.0f} rows/s, trigger {p['trigger_ms']} ms. Version 1 → 2 (direct: the state renamed "
        "and extended by its StateUpgrade, key by key on first use), back to 1 (the StateUpgrade back), then 1 → 2 "
        f"with a shadow of {p['shadow_epochs']} epochs (both versions on the same input, outputs compared on key and "
        f"count, then cut over). Load average at start {s['loadavg_start']}, at end {s['loadavg_end']}.", "",
        rp.md_table(rows, list(rows[0])), "",
        f"Steady p99 (the windows before each action): **{fmt(s['steady_p99_ms'])} ms**. Upgrade max / steady p99 "
        f"**{fmt(s['max_over_steady_p99'], '.2f')}** (goal ≤ 1.5: {g['max_over_steady_p99_le_1_5']}); rollback "
        f"**{fmt(s['rollback_max_over_steady_p99'], '.2f')}** "
        f"(goal ≤ 1.5: {g['rollback_max_over_steady_p99_le_1_5']}); "
        f"shadow upgrade {fmt(s['shadow_max_over_steady_p99'], '.2f')}.", "",
        f"Exactness over the whole run: {fmt(c.get('records'))} input records of {fmt(c.get('keys'))} keys up to "
        f"the last committed epoch; **{c.get('lost')} lost, {c.get('doubled')} doubled** (every key's last "
        f"output count against its records; {fmt(c.get('outputs'))} outputs).", "",
        "![timeline](latency_timeline.png)\n\n![ccdf](latency_ccdf.png)\n",
    ])
