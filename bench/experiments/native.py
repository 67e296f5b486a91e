"""Experiment 3, Spark's own options: native `groupBy(key).count()` (RocksDB) throughput on the same
input; stop + offline state repartition + restart vs Ballast's live rescale.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

from bench import report as rp
from bench.experiments.common import Ctx, _gen_stats, _prefill, _prog_end, _read_progress, _start_gen
from bench.infra import PY, Proc, ensure_topics, wait_until
from bench.loadgen import Schedule
from bench.rss import RssSampler


def _prog_backlog(p: dict[str, Any], sched: Schedule) -> int | None:
    """Rows scheduled by the end of this batch but not yet read (open-loop backlog).

    Spark's Kafka progress has `latestOffset: null` here, so the backlog comes from the load
    schedule: records due by the batch's end − records read (end offsets above the schedule's base)."""
    try:
        end = p["sources"][0]["endOffset"]
        end = json.loads(end) if isinstance(end, str) else end
        read = sum(int(v) - sched.base[int(k)] for parts in end.values() for k, v in parts.items())
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    due = max(0.0, (_prog_end(p) - sched.t0) * sched.segments[0].rate)
    return int(max(0.0, due - read))


def native_throughput(ctx: Ctx, topic: str, rows: int, max_offsets: int) -> dict[str, Any]:
    out = ctx.run_dir / "native"
    prog = out / "throughput.progress.jsonl"
    p = Proc([PY, "-m", "bench.native_job", "run", "--topic", topic, "--bootstrap", ctx.bootstrap,
              "--checkpoint", str(ctx.run_dir / "ckpt" / "native-throughput"), "--partitions",
              str(ctx.profile.workers), "--trigger-ms", str(ctx.profile.trigger_ms), "--max-offsets-per-trigger",
              str(max_offsets), "--progress", str(prog), "--until-rows", str(rows)],
             ctx.run_dir / "logs" / "native-throughput.log", "native job").start()
    rss = RssSampler(p.pid).start()
    rc = p.wait(timeout=ctx.profile.timeouts_s)
    rss.stop()
    if rc != 0:
        raise RuntimeError(f"native throughput run failed:\n{p.tail()}")
    prog_rows = [x for x in _read_progress(prog) if x.get("numInputRows", 0) > 0]
    body = prog_rows[1:] if len(prog_rows) > 1 else prog_rows
    n = sum(x["numInputRows"] for x in body)
    wall = _prog_end(body[-1]) - _prog_end(prog_rows[0]) if len(prog_rows) > 1 else \
        sum(x["durationMs"]["triggerExecution"] for x in body) / 1000
    state = (prog_rows[-1].get("stateOperators") or [{}])[0]
    return {"rows": n, "rows_per_s": n / wall if wall > 0 else math.nan, "batches": len(body),
            "peak_rss_mb": rss.peak_mb(), "state_partitions": state.get("numShufflePartitions"),
            "state_rows": state.get("numRowsTotal")}


def native_reconfig(ctx: Ctx, keys: int, rate: float) -> dict[str, Any]:
    """Spark's only way to change a stateful query's parallelism: stop it, repartition the state
    offline (4.2, experimental), start it again. Downtime = longest gap between batch completions."""
    P = ctx.profile
    out = ctx.run_dir / "native"
    out.mkdir(parents=True, exist_ok=True)
    topic = ctx.name("native-reconfig") + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    _prefill(ctx, topic, keys)
    ckpt = ctx.run_dir / "ckpt" / "native-reconfig"
    prog1, prog2 = out / "reconfig.before.jsonl", out / "reconfig.after.jsonl"

    def start(prog: Path, parts: int) -> Proc:
        return Proc([PY, "-m", "bench.native_job", "run", "--topic", topic, "--bootstrap", ctx.bootstrap,
                     "--checkpoint", str(ckpt), "--partitions", str(parts), "--trigger-ms", str(P.native_trigger_ms),
                     "--max-offsets-per-trigger", str(P.catchup_max_offsets), "--progress", str(prog)],
                    ctx.run_dir / "logs" / f"native-reconfig-{prog.stem}.log", "native job").start()

    job = start(prog1, P.workers)
    wait_until(lambda: sum(x.get("numInputRows", 0) for x in _read_progress(prog1)) >= keys, P.timeouts_s,
               "native job to read its prefill", poll=0.5, proc=job)
    gen, sched_path = _start_gen(ctx, topic, keys, f"{rate}:100000", "native-reconfig")
    sched = Schedule.load(sched_path)
    t_ready = time.time()
    wait_until(lambda: len([x for x in _read_progress(prog1) if _prog_end(x) > t_ready]) >= 6, P.timeouts_s,
               "native steady batches", poll=0.5, proc=job)
    time.sleep(P.steady_s)
    t_stop = time.time()
    job.stop(timeout=120)
    t_stopped = time.time()
    rp_proc = Proc([PY, "-m", "bench.native_job", "repartition", "--checkpoint", str(ckpt), "--partitions",
                    str(P.reconfig_to_workers)], ctx.run_dir / "logs" / "native-repartition.log", "repartition").start()
    rc = rp_proc.wait(timeout=P.timeouts_s)
    t_repart = time.time()
    repart_ok = rc == 0
    repart_doc: dict[str, Any] = {}
    for line in rp_proc.tail(200).splitlines():
        if line.startswith("{") and "repartition_s" in line:
            repart_doc = json.loads(line)
    job2 = start(prog2, P.reconfig_to_workers)
    try:
        wait_until(lambda: len(_read_progress(prog2)) >= 1, P.timeouts_s, "restarted native job", poll=0.25, proc=job2)
        before = _read_progress(prog1)
        steady_backlog = [b for x in before if _prog_end(x) > t_ready and (b := _prog_backlog(x, sched)) is not None]
        thr = max(rate * P.native_trigger_ms / 1000 * 2, (max(steady_backlog) if steady_backlog else 0) * 1.5)

        def recovered() -> bool:
            return any(_prog_end(x) > t_stop and (b := _prog_backlog(x, sched)) is not None and b <= thr
                       for x in _read_progress(prog2))
        try:
            wait_until(recovered, P.timeouts_s, "native job to catch up after restart", poll=0.5, proc=job2)
        except TimeoutError:
            pass
        time.sleep(P.steady_s)
    finally:
        gen.stop(timeout=60)
        job2.stop(timeout=120)
    before, after = _read_progress(prog1), _read_progress(prog2)
    last_before = max(_prog_end(x) for x in before)
    first_after = min(_prog_end(x) for x in after)
    rec = [x for x in after if (b := _prog_backlog(x, sched)) is not None and b <= thr]
    steady_ends = sorted(_prog_end(x) for x in before if _prog_end(x) > t_ready)
    state_after = (after[-1].get("stateOperators") or [{}])[0]
    res = {
        "downtime_s": first_after - last_before,
        "stop_s": t_stopped - t_stop, "offline_repartition_s": t_repart - t_stopped, "repartition_ok": repart_ok,
        "repartition_inner_s": repart_doc.get("repartition_s"),
        "repartition_enforced_exactly_once": repart_doc.get("enforce_exactly_once_sink"),
        "restart_to_first_batch_s": first_after - t_repart,
        "recovery_s": (min(_prog_end(x) for x in rec) - t_stop) if rec else math.nan,
        "steady_batch_gap_s": (statistics.median([b - a for a, b in zip(steady_ends, steady_ends[1:])])
                               if len(steady_ends) > 2 else math.nan),
        "state_partitions_before": ((before[-1].get("stateOperators") or [{}])[0]).get("numShufflePartitions"),
        "state_partitions_after": state_after.get("numShufflePartitions"),
        "state_rows_after": state_after.get("numRowsTotal"),
        "rate": rate, "keys": keys, "generator": _gen_stats(sched_path),
    }
    t_ref = t_ready
    rows = [{"phase": "before", "t_s": _prog_end(x) - t_ref, "rows": x.get("numInputRows"),
             "backlog": _prog_backlog(x, sched),
             "duration_ms": x["durationMs"].get("triggerExecution")} for x in before] + \
           [{"phase": "after", "t_s": _prog_end(x) - t_ref, "rows": x.get("numInputRows"),
             "backlog": _prog_backlog(x, sched),
             "duration_ms": x["durationMs"].get("triggerExecution")} for x in after]
    rp.write_csv(out / "reconfig_batches.csv", rows)
    rp.plot_series(out / "reconfig_backlog.png",
                   {"backlog (rows)": ([r["t_s"] for r in rows], [r["backlog"] or 0 for r in rows])},
                   f"Spark native: stop → offline repartition {P.workers}→{P.reconfig_to_workers} → restart", "rows",
                   marks=[(t_stop - t_ref, "stop"), (t_stopped - t_ref, "stopped"), (t_repart - t_ref, "repartitioned"),
                          (first_after - t_ref, "first batch")])
    return res


def exp_native(ctx: Ctx) -> dict[str, Any]:
    P = ctx.profile
    out = ctx.run_dir / "native"
    out.mkdir(parents=True, exist_ok=True)
    mig = ctx.shared.get("migration")
    res: dict[str, Any] = {}
    if mig:
        first = next(iter(mig["by_bins"].values()))
        res["ballast_throughput"] = first["catchup"]
        res["native_throughput"] = native_throughput(ctx, first["topic"], first["keys"], P.catchup_max_offsets)
        rc = [m for m in first["migrations"] if m["role"] == "reconfig"]
        if rc:
            m = rc[0]
            ep = first["epochs"]
            t0 = m["t_emit_rel_s"]
            res["ballast_reconfig"] = {
                "downtime_s": m["max_epoch_gap_s"], "duration_s": m["duration_s"],
                "max_latency_ms": m["max_latency_ms"], "steady_p99_ms": m["steady_p99_ms"],
                "steady_batch_gap_s": m["steady_epoch_gap_s"], "steps": m["steps"], "bins_moved": m["bins_moved"],
                "keys_moved": m["keys_moved"], "epochs_total": len(ep), "t_emit_rel_s": t0,
            }
    try:
        res["native_reconfig"] = native_reconfig(ctx, P.native_reconfig_keys or P.keys, P.rate)
    except Exception:  # noqa: BLE001 - keep the throughput figures; run.py reports the error
        import traceback

        res["errors"] = traceback.format_exc()
        res["native_reconfig"] = {}
    nr, br = res["native_reconfig"], res.get("ballast_reconfig", {})
    rows = [{"system": "Spark native: stop + offline repartition + restart", "downtime_s": nr.get("downtime_s"),
             "recovery_s": nr.get("recovery_s"), "state_kept": nr.get("repartition_ok"),
             "partitions": f"{nr.get('state_partitions_before')}→{nr.get('state_partitions_after')}"},
            {"system": "Ballast live migration (batched)", "downtime_s": br.get("downtime_s"),
             "recovery_s": br.get("duration_s"), "state_kept": True,
             "partitions": f"W {P.workers}→{P.reconfig_to_workers}"}]
    rp.write_csv(out / "reconfig.csv", rows)
    tp = [{"system": "Spark native groupBy.count (RocksDB)", **res.get("native_throughput", {})},
          {"system": "Ballast key-count", **res.get("ballast_throughput", {})}]
    rp.write_csv(out / "throughput.csv", tp, ["system", "rows", "rows_per_s", "batches", "peak_rss_mb"])
    rp.plot_bars(out / "native_vs_ballast.png", ["Spark native", "Ballast"],
                 {"rows/s (same input)": [res.get("native_throughput", {}).get("rows_per_s"),
                                          res.get("ballast_throughput", {}).get("rows_per_s")],
                  "reconfig downtime s": [nr.get("downtime_s"), br.get("downtime_s")]},
                 "Spark's own options vs Ballast")
    (out / "README.md").write_text(
        "# Spark's own options vs Ballast\n\n"
        "Throughput on the same input (the migration experiment's prefill topic, same maxOffsetsPerTrigger, "
        f"{P.workers} state partitions / workers):\n\n"
        + rp.md_table(tp, ["system", "rows", "rows_per_s", "batches", "peak_rss_mb"])
        + "\n\nChanging parallelism. Spark: `spark.sql.shuffle.partitions` is frozen in the checkpoint; PySpark 4.2 "
        "has an experimental *offline* state repartition (`spark._streamingCheckpointManager.repartition`), so the "
        "native path is stop → repartition → restart. Without it, a new checkpoint loses all state (counts restart "
        "from zero unless the whole input is replayed from the earliest offset). Ballast moves bins live.\n\n"
        + rp.md_table(rows, ["system", "downtime_s", "recovery_s", "state_kept", "partitions"])
        + "\n\ndowntime = longest gap between two consecutive batch/epoch completions; native recovery = from the "
        "stop request until the backlog is back to its steady level; Ballast 'recovery' = plan duration (the job never "
        "stops).\n\n![](native_vs_ballast.png)\n\n![](reconfig_backlog.png)\n")
    return res
