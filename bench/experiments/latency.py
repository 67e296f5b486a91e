"""Latency side by side: Spark native (`groupBy(key).count()`, RocksDB, update mode, Kafka sink) against
Ballast key-count on the same open-loop input, one job per system and trigger.

Each job runs the profile's rates one after the other (`latency_segment_s` each), is stopped, a
backlog of `latency_backlog_rows` is written while it is down, and it is restarted from its
checkpoint: the restart's first epoch is the cold start, the catch-up that follows is the
throughput at saturation. Latency = the answer's Kafka timestamp − the record's scheduled time.
Per epoch, where the time goes: native from Spark's progress (`durationMs`), Ballast from its
metrics DB and the runner's phase log line.
"""

from __future__ import annotations

import math
import statistics
import time
from bisect import bisect_right
from pathlib import Path
from typing import Any

from bench import report as rp
from bench.ballast_job import (
    OPERATOR,
    BallastJob,
    JobSpec,
    OffsetLogTail,
    offset_ranges,
    output_times,
    record_latencies,
)
from bench.experiments.common import Ctx, _gen_stats, _prefill, _prog_end, _read_progress, _start_gen
from bench.hist import LogHistogram
from bench.infra import PY, Proc, ensure_topics, unix, wait_until
from bench.loadgen import Schedule
from spark_jobs.epoch_times import parse_log
from spark_jobs.runner import QUERY_STARTED

NATIVE_PARTS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class _Native:
    """The Spark-native job as the latency run drives it (start, stop, progress, answers)."""

    def __init__(self, ctx: Ctx, label: str, topic: str, trigger_ms: int) -> None:
        self.ctx, self.label, self.topic, self.trigger_ms = ctx, label, topic, trigger_ms
        self.out_topic = f"{topic}-out"
        ensure_topics({self.out_topic: 2}, ctx.bootstrap)
        self.ckpt = ctx.run_dir / "ckpt" / label
        self.progress: list[Path] = []
        self.proc: Proc | None = None

    def start(self) -> float:
        prog = self.ctx.run_dir / "latency" / f"{self.label}.{len(self.progress)}.progress.jsonl"
        self.progress.append(prog)
        self.proc = Proc([PY, "-m", "bench.native_job", "run", "--topic", self.topic, "--bootstrap",
                          self.ctx.bootstrap, "--checkpoint", str(self.ckpt), "--partitions", "2", "--trigger-ms",
                          str(self.trigger_ms), "--max-offsets-per-trigger",
                          str(self.ctx.profile.latency_max_offsets), "--progress", str(prog), "--output-topic",
                          self.out_topic], self.ctx.run_dir / "logs" / f"{self.label}.log", "native job").start()
        started = Path(f"{prog}.started")
        wait_until(started.exists, 300, "native query to start", poll=0.2, proc=self.proc)
        return time.time()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(timeout=120)

    def batches(self) -> list[dict[str, Any]]:
        return [p for f in self.progress for p in _read_progress(f)]

    def epochs(self) -> list[dict[str, Any]]:
        """One row per batch: start, end, rows, the progress's duration parts."""
        out = []
        for p in self.batches():
            d = p.get("durationMs", {})
            out.append({"epoch": p["batchId"], "started_at": _ts(p["timestamp"]), "ended_at": _prog_end(p),
                        "input_rows": int(p.get("numInputRows", 0)), "batch_ms": float(d.get("triggerExecution", 0)),
                        **{k: float(d.get(k, 0)) for k in NATIVE_PARTS}})
        return out

    def latencies(self, sched: Schedule) -> Any:
        ranges: dict[int, dict[int, tuple[int, int]]] = {}
        for p in self.batches():
            src = (p.get("sources") or [{}])[0]
            end = (src.get("endOffset") or {}).get(self.topic) if isinstance(src.get("endOffset"), dict) else None
            start = (src.get("startOffset") or {}).get(self.topic) if isinstance(src.get("startOffset"), dict) else {}
            if end:
                ranges[p["batchId"]] = {int(k): (int((start or {}).get(k, 0)), int(v)) for k, v in end.items()}
        eps = sorted(self.epochs(), key=lambda e: e["started_at"])
        starts = [e["started_at"] for e in eps]
        from spark_jobs.output import scan_topic

        answers: dict[int, float] = {}
        for msg in scan_topic(self.ctx.bootstrap, self.out_topic, 300, from_ms=int(sched.t0 * 1000) - 2000):
            ts = msg.timestamp / 1000.0
            i = bisect_right(starts, ts + 0.005) - 1  # the batch that was running when the answer was sent
            if i >= 0:
                b = eps[i]["epoch"]
                answers[b] = max(answers.get(b, 0.0), ts)
        return record_latencies(sched, ranges, answers)


class _Ballast:
    """Ballast key-count as the latency run drives it; its job log has each epoch's phases (`epoch N time ms:`)."""

    def __init__(self, ctx: Ctx, label: str, topic: str, trigger_ms: int, *, extra_args: tuple[str, ...] | None = None,
                 bins: int | None = None, max_offsets: int | None = None, workers: int = 2,
                 operator: str = OPERATOR, operator_path: str | None = None, env: dict[str, str] | None = None) -> None:
        """`extra_args`, `bins`, `max_offsets`: None takes the profile's (the `trace` and `autotune`
        experiments set their own, and the latter its own operator and worker count)."""
        P = ctx.profile
        self.ctx, self.topic = ctx, topic
        if extra_args is None:  # e.g. `--set 'extra={"latency_job_args": ["--no-trace"]}'`
            extra_args = tuple(P.extra.get("latency_job_args", ()))
        self.spec = JobSpec(job=ctx.name(label), input_topic=topic, bins=bins or P.latency_bins, workers=workers,
                            db_url=ctx.db_url, bootstrap=ctx.bootstrap, run_dir=ctx.run_dir, trigger_ms=trigger_ms,
                            max_offsets_per_trigger=max_offsets or P.latency_max_offsets, log_level="DEBUG",
                            extra_args=extra_args, operator=operator, operator_path=operator_path,
                            env=dict(env or {}))
        self.job = BallastJob(self.spec)
        self.tail = OffsetLogTail(self.spec.checkpoint_dir, topic)
        self.log = ctx.run_dir / "logs" / f"{self.spec.job}.log"

    def start(self) -> float:
        mark = self.log.stat().st_size if self.log.exists() else 0
        self.job = BallastJob(self.spec).start()

        def ready() -> bool:  # warm-up done: the query starts right after it
            if not self.log.exists():
                return False
            with self.log.open("rb") as fh:
                fh.seek(mark)
                text = fh.read().decode(errors="replace")
            return QUERY_STARTED in text
        wait_until(ready, 300, "Ballast job to start its query", poll=0.2, proc=self.job.proc)
        if not self.tail._t.is_alive():  # noqa: SLF001 - one tail across the restart
            self.tail.start()
        return time.time()

    def stop(self) -> None:
        self.job.stop()

    def epochs(self) -> list[dict[str, Any]]:
        phases = {e: (inside.get("db", math.nan), inside.get("acks", math.nan))
                  for e, (inside, _) in parse_log(self.log.read_text(errors="replace")).items()}
        eps = self.job.epochs()
        wk: dict[int, list[Any]] = {}
        for w in self.job.worker_rows([e.epoch for e in eps]):
            wk.setdefault(w.epoch, []).append(w)
        out = []
        for e in eps:
            ws = wk.get(e.epoch, [])
            useful = max((w.useful_ms for w in ws), default=0.0)
            wall = max((w.wall_ms for w in ws), default=0.0)
            db, acks = phases.get(e.epoch, (math.nan, math.nan))
            out.append({"epoch": e.epoch, "started_at": unix(e.started_at), "ended_at": unix(e.ended_at),
                        "input_rows": e.input_rows, "batch_ms": e.batch_ms, "fold_store_ms": useful,
                        "task_io_ms": max(0.0, wall - useful),
                        "spark_outside_task_ms": max(0.0, e.batch_ms - wall), "db_commit_ms": db, "acks_ms": acks})
        return out

    def latencies(self, sched: Schedule) -> Any:
        ends = self.tail.stop()
        ranges = offset_ranges(self.spec.checkpoint_dir, self.topic, ends)
        answers = output_times(self.ctx.bootstrap, f"{self.spec.job}.output", int(sched.t0 * 1000) - 2000)
        return record_latencies(sched, ranges, answers)


def _stats(values: Any) -> dict[str, float]:
    h = LogHistogram()
    h.record(values)
    return {"n": h.total, "p50_ms": h.percentile(50), "p99_ms": h.percentile(99),
            "max_ms": h.max if h.total else math.nan}


def _cold(eps: list[dict[str, Any]], after: float) -> dict[str, float]:
    """First epoch with data after `after` against the median of the next data epochs (same input)."""
    data = [e for e in eps if e["started_at"] >= after - 1 and e["input_rows"] > 0]
    if len(data) < 3:
        return {"first_ms": math.nan, "steady_ms": math.nan, "ratio": math.nan}
    steady = statistics.median(e["batch_ms"] for e in data[1:8])
    return {"first_ms": data[0]["batch_ms"], "steady_ms": steady, "ratio": data[0]["batch_ms"] / steady}


def _caught_up(job: Any, since: float, rows: int, trigger_ms: int) -> bool:
    """The restart read its backlog (rows, not offsets: a topic's offsets may include markers) and
    then stayed idle for a few triggers."""
    eps = [e for e in job.epochs() if e["started_at"] >= since - 1]
    read = sum(e["input_rows"] for e in eps)
    last = max((e["ended_at"] for e in eps if e["input_rows"]), default=time.time())
    return read >= 0.99 * rows and time.time() - last > max(3.0, 4 * trigger_ms / 1000)


def open_loop(ctx: Ctx, job: _Native | _Ballast, topic: str, keys: int, rates: str, label: str,
              trigger_ms: int) -> tuple[float, Schedule, Path]:
    """Start `job`, run the open-loop generator's `rates` ("rows/s:seconds,...") on `topic`, and wait
    until every scheduled row is answered (a slow first epoch must not be cut short). The caller
    stops the job. Returns the query's start time, the schedule and its file."""
    t_started = job.start()
    gen, sched_path = _start_gen(ctx, topic, keys, rates, label)
    try:
        gen.wait(timeout=sum(float(r.split(":")[1]) for r in rates.split(",")) + 300)
        sched = Schedule.load(sched_path)
        wait_until(lambda: _caught_up(job, t_started, sched.total, trigger_ms), ctx.profile.timeouts_s,
                   f"{label} to answer the open loop", poll=1.0)
    finally:
        gen.stop(timeout=60)
    return t_started, sched, sched_path


def run_one(ctx: Ctx, system: str, trigger_ms: int) -> dict[str, Any]:
    P = ctx.profile
    label = f"lat-{system}-t{trigger_ms}"
    topic = ctx.name(label) + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    job: _Native | _Ballast = (_Native if system == "native" else _Ballast)(ctx, label, topic, trigger_ms)
    rates = ",".join(f"{r}:{P.latency_segment_s}" for r in P.latency_rates)
    try:
        t_started, sched, sched_path = open_loop(ctx, job, topic, P.latency_keys, rates, label, trigger_ms)
        job.stop()
        _prefill(ctx, topic, P.latency_backlog_rows)  # the backlog the restart catches up on
        t_restart = job.start()
        wait_until(lambda: _caught_up(job, t_restart, P.latency_backlog_rows, trigger_ms), P.timeouts_s,
                   f"{label} to catch up after the restart", poll=1.0)
    finally:
        job.stop()
    lat = job.latencies(sched)
    eps = job.epochs()
    t0, seg = sched.t0, P.latency_segment_s
    sched_t = lat.t_out - lat.lat_ms / 1000.0  # each record's scheduled time
    res: dict[str, Any] = {"system": system, "trigger_ms": trigger_ms, "unanswered": lat.unanswered,
                           "generator": _gen_stats(sched_path), "start_to_load_s": t0 - t_started,
                           "first_minute": _stats(lat.lat_ms[sched_t < t0 + P.latency_first_s]), "rates": {}}
    for i, r in enumerate(P.latency_rates):
        a, b = t0 + i * seg, t0 + (i + 1) * seg
        sel = (sched_t >= a) & (sched_t < b)
        steady = sel & (sched_t >= max(a + 5, t0 + P.latency_first_s))
        run_eps = [e for e in eps if a <= e["ended_at"] < b + 2 and e["input_rows"]]
        res["rates"][str(int(r))] = {"whole": _stats(lat.lat_ms[sel]), "steady": _stats(lat.lat_ms[steady]),
                                     "median_batch_ms": statistics.median([e["batch_ms"] for e in run_eps])
                                     if run_eps else math.nan}
    res["cold_start"] = _cold(eps, t_started)
    res["cold_restart"] = _cold(eps, t_restart)
    body = [e for e in eps if e["started_at"] >= t_restart - 1 and e["input_rows"] > 0][1:]
    span = body[-1]["ended_at"] - body[0]["started_at"] if len(body) > 1 else math.nan
    res["saturation_rows_per_s"] = sum(e["input_rows"] for e in body) / span if span == span and span > 0 else math.nan
    parts = [k for k in eps[0] if k not in ("epoch", "started_at", "ended_at", "input_rows", "batch_ms")] if eps else []
    steady_eps = [e for e in eps if t0 + P.latency_first_s <= e["started_at"] < t_restart - 5 and e["input_rows"]]
    nxt = {e["epoch"]: e["started_at"] for e in eps}
    for e in eps:  # idle: from this epoch's end to the next one's start (commit, acks, trigger wait)
        e["gap_to_next_ms"] = (nxt[e["epoch"] + 1] - e["ended_at"]) * 1000 if e["epoch"] + 1 in nxt else math.nan
    res["breakdown_median_ms"] = {k: statistics.median([e[k] for e in steady_eps if e[k] == e[k]] or [math.nan])
                                  for k in parts + ["batch_ms", "gap_to_next_ms"]}
    rp.write_csv(ctx.run_dir / "latency" / f"{label}.epochs.csv", eps)
    return res


def exp_latency(ctx: Ctx) -> dict[str, Any]:
    P = ctx.profile
    out = ctx.run_dir / "latency"
    out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, dict[str, Any]] = {}
    for trig in P.latency_triggers:
        for system in ("native", "ballast"):  # one at a time: 2 cores
            r = run_one(ctx, system, trig)
            runs[f"{system}-t{trig}"] = r
            ctx.log(f"[latency] {system} trigger {trig} ms: first minute p99 {r['first_minute']['p99_ms']:.0f} ms, "
                    f"cold start {r['cold_start']['ratio']:.2f}x, restart {r['cold_restart']['ratio']:.2f}x, "
                    f"saturation {r['saturation_rows_per_s']:.0f} rows/s")
    return summarize(ctx, runs, out)


def summarize(ctx: Ctx, runs: dict[str, dict[str, Any]], out: Path) -> dict[str, Any]:
    P = ctx.profile
    rows: list[dict[str, Any]] = []
    summary: dict[str, Any] = {"by_trigger_rate": {}, "runs": runs}
    for trig in P.latency_triggers:
        n, b = runs[f"native-t{trig}"], runs[f"ballast-t{trig}"]
        for rate in [str(int(r)) for r in P.latency_rates] + ["first_minute"]:
            nw = n["first_minute"] if rate == "first_minute" else n["rates"][rate]["whole"]
            bw = b["first_minute"] if rate == "first_minute" else b["rates"][rate]["whole"]
            ns = {} if rate == "first_minute" else n["rates"][rate]["steady"]
            bs = {} if rate == "first_minute" else b["rates"][rate]["steady"]
            row = {"trigger_ms": trig, "rate": rate,
                   **{f"{s}_{k}": d.get(k, math.nan) for s, d in (("native", nw), ("ballast", bw))
                      for k in ("p50_ms", "p99_ms", "max_ms")},
                   "native_steady_p99_ms": ns.get("p99_ms", math.nan),
                   "ballast_steady_p99_ms": bs.get("p99_ms", math.nan)}
            row["p99_ratio"] = row["ballast_p99_ms"] / row["native_p99_ms"] if row["native_p99_ms"] else math.nan
            row["steady_p99_ratio"] = (row["ballast_steady_p99_ms"] / row["native_steady_p99_ms"]
                                       if row["native_steady_p99_ms"] else math.nan)
            rows.append(row)
            summary["by_trigger_rate"][f"t{trig}@{rate}"] = row
        summary[f"t{trig}"] = {
            "saturation_rows_per_s": {"native": n["saturation_rows_per_s"], "ballast": b["saturation_rows_per_s"]},
            "saturation_ratio": b["saturation_rows_per_s"] / n["saturation_rows_per_s"]
            if n["saturation_rows_per_s"] else math.nan,
            "cold_start_ratio": {"native": n["cold_start"]["ratio"], "ballast": b["cold_start"]["ratio"]},
            "cold_restart_ratio": {"native": n["cold_restart"]["ratio"], "ballast": b["cold_restart"]["ratio"]},
            "breakdown_median_ms": {"native": n["breakdown_median_ms"], "ballast": b["breakdown_median_ms"]}}
    ratios = [r["p99_ratio"] for r in rows if r["p99_ratio"] == r["p99_ratio"]]
    summary["ballast_p99_over_native_worst"] = max(ratios) if ratios else math.nan
    summary["ballast_first_epoch_over_steady_worst"] = max(
        (summary[f"t{t}"]["cold_restart_ratio"]["ballast"] for t in P.latency_triggers), default=math.nan)
    rp.write_csv(out / "latency.csv", rows)
    labels = [f"{r['rate']}@{r['trigger_ms']}ms" for r in rows]
    rp.plot_bars(out / "latency_p99.png", labels,
                 {"native p99 ms": [r["native_p99_ms"] for r in rows],
                  "Ballast p99 ms": [r["ballast_p99_ms"] for r in rows],
                  "Ballast / native p99": [r["p99_ratio"] for r in rows]},
                 "p99 latency, same open-loop input (rate rows/s @ trigger)")
    bd = {f"{s}-t{t}": runs[f"{s}-t{t}"]["breakdown_median_ms"] for t in P.latency_triggers
          for s in ("native", "ballast")}
    rp.plot_stacked(out / "epoch_breakdown.png", bd, "median steady epoch: where the time goes (ms)")
    (out / "README.md").write_text(
        "# Latency: Spark native vs Ballast, same open-loop input\n\n"
        f"Rates {list(P.latency_rates)} rows/s, {P.latency_segment_s:.0f} s each, triggers {list(P.latency_triggers)} "
        f"ms, {P.latency_keys} keys, B={P.latency_bins}, W=2 / 2 state partitions, maxOffsetsPerTrigger "
        f"{P.latency_max_offsets}. 'first_minute' = records scheduled in the first {P.latency_first_s:.0f} s after "
        "the query started; steady = the rest of each rate's segment (minus its first 5 s).\n\n"
        + rp.md_table(rows, ["trigger_ms", "rate", "native_p50_ms", "native_p99_ms", "native_max_ms",
                             "ballast_p50_ms", "ballast_p99_ms", "ballast_max_ms", "p99_ratio", "steady_p99_ratio"])
        + "\n\n" + "\n".join(
            f"- trigger {t} ms: saturation rows/s {summary[f't{t}']['saturation_rows_per_s']}, first epoch ÷ steady "
            f"at start {summary[f't{t}']['cold_start_ratio']}, after the restart "
            f"{summary[f't{t}']['cold_restart_ratio']}" for t in P.latency_triggers)
        + "\n\n![](latency_p99.png)\n\n![](epoch_breakdown.png)\n")
    return summary
