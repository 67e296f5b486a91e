"""Experiment 7's cost part: each NEXMark query's cost per event under Ballast against the same query
in Spark's own operators (bench/nexmark_native.py), over one backlog both read from the start.

Why paired rounds: two full-profile runs of the same code on a quiet machine gave Q1 0.90 and 1.42,
Q7 1.02 and 1.31 (2026-11-27), because every native query ran first and every Ballast job after
them, minutes apart, and the machine's state drifts over minutes. Now each round runs, per query,
the two sides back to back, native first in even rounds and Ballast first in odd ones (so neither
always meets the warmer page cache or the quieter minute), and a query's ratio is the median of its
rounds' own ratios (`nexmark_cost_rounds`; 1 in the smoke). Each side is a fresh application per
run: the same cold start for both.

ms per event = the wall time from the end of the first data batch to the end of the last one (any
operator of the job) ÷ the backlog's events read after the first batch.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback
from collections.abc import Callable
from typing import Any

from bench.ballast_job import BallastJob, JobSpec
from bench.cp_summary import job_cp
from bench.experiments.common import Ctx, _prog_end, _read_progress
from bench.infra import PY, Proc, ensure_topics, unix, wait_until
from bench.loadgen import end_offsets

PARTITIONS = 2  # of each topic the writer fills


def run_cost(ctx: Ctx, prefix: str, events: int, spec_for: Callable[[str, str], JobSpec],
             ) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Every query of `nexmark_cost_queries`, `nexmark_cost_rounds` paired rounds; returns
    {query: combined result} and the failures (one query's failure does not lose the others).
    `spec_for(label, query)` is the Ballast job of a query."""
    P = ctx.profile
    rounds = max(1, int(P.nexmark_cost_rounds))
    runs: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {q: [] for q in P.nexmark_cost_queries}
    errors: list[str] = []
    for r in range(rounds):
        for q in P.nexmark_cost_queries:
            tag = "" if r == 0 else f"-r{r}"
            sides: dict[str, dict[str, Any]] = {}
            try:
                for side in (("native", "ballast") if r % 2 == 0 else ("ballast", "native")):
                    sides[side] = (_native_one(ctx, q, prefix, events, tag) if side == "native"
                                   else _ballast_cost(ctx, spec_for(f"nxc-{q}{tag}", q), events))
            except Exception:  # noqa: BLE001 - reported by run.py; the other rounds and queries go on
                errors.append(f"cost {q} round {r + 1}:\n{traceback.format_exc()}")
                continue
            b, n = sides["ballast"], sides["native"]
            runs[q].append((b, n))
            note = f" (native: {n['error']})" if n.get("error") else ""
            ctx.log(f"[nexmark cost {q}, round {r + 1}/{rounds}] Ballast {b['ms_per_event']:.4f} ms/event, native "
                    f"{n['ms_per_event']:.4f} ms/event: ratio {_ratio(b, n):.2f}{note}")
    out = {q: combine_rounds(rs) for q, rs in runs.items() if rs}
    for q, c in out.items():
        if rounds > 1:
            ctx.log(f"[nexmark cost {q}] median of {len(c['ratios'])} paired rounds: ratio {c['ratio']:.2f} "
                    f"(rounds {', '.join(f'{x:.2f}' for x in c['ratios'])})")
    return out, errors


def _ratio(b: dict[str, Any], n: dict[str, Any]) -> float:
    return b["ms_per_event"] / n["ms_per_event"] if n.get("ms_per_event") else math.nan


def combine_rounds(runs: list[tuple[dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    """One query's result over its rounds: each side's median ms/event, the median of the rounds'
    own ratios (a pair meets the machine's drift together), and, as `ballast`/`native`, the round
    whose ratio is the median one (its critical path, rows and batches)."""
    ratios = [_ratio(b, n) for b, n in runs]
    order = sorted(range(len(runs)), key=lambda i: (math.isnan(ratios[i]), ratios[i]))
    mid_b, mid_n = runs[order[(len(order) - 1) // 2]]
    finite = [x for x in ratios if not math.isnan(x)]
    b_ms = [b["ms_per_event"] for b, _ in runs if not math.isnan(b["ms_per_event"])]
    n_ms = [n["ms_per_event"] for _, n in runs if not math.isnan(n["ms_per_event"])]
    return {"ballast": mid_b, "native": mid_n,
            "ballast_ms_per_event": statistics.median(b_ms) if b_ms else math.nan,
            "native_ms_per_event": statistics.median(n_ms) if n_ms else math.nan,
            "ratio": statistics.median(finite) if finite else math.nan, "ratios": ratios,
            "native_error": next((n.get("error") for _, n in runs if n.get("error")), None)}


def _ballast_cost(ctx: Ctx, spec: JobSpec, events: int) -> dict[str, Any]:
    """The backlog through one fresh Ballast job: its data epochs, every operator of a chain."""
    P = ctx.profile
    job = BallastJob(spec).start()
    names = [op.partition("=")[0] for op in spec.operators] or [spec.operator]
    stores = [BallastJob(JobSpec(**{**spec.__dict__, "operator": n})) for n in names]
    idle_s = max(4.0, 8 * spec.trigger_ms / 1000)

    def data_epochs() -> list[list[Any]]:
        return [[e for e in s.epochs() if e.input_rows > 0] for s in stores]

    rows = _rows_to_read(ctx, spec)

    def done() -> bool:
        eps = data_epochs()
        last = max((unix(e.ended_at) for es in eps for e in es), default=time.time())
        return sum(e.input_rows for e in eps[0]) >= rows and time.time() - last > idle_s
    try:
        wait_until(done, P.timeouts_s, f"{spec.job} to read its backlog ({rows} of its {events} events in the "
                   "topics its query reads)", poll=1.0, proc=job.proc)
    finally:
        job.stop()
    eps = data_epochs()
    first = eps[0][0]
    t_a = unix(first.ended_at)
    t_b = max(unix(e.ended_at) for es in eps for e in es)
    read = sum(e.input_rows for e in eps[0])
    # what held its epochs back, per operator (bench.cp_summary; docs/tracing.md)
    cp = {n.rsplit(".", 1)[-1]: job_cp(ctx.db_url, spec.job, n) for n in names}
    return _cost(events, read, read - first.input_rows, t_b - t_a, len(eps[0])) | {"critical_path": cp}


def _rows_to_read(ctx: Ctx, spec: JobSpec) -> int:
    """The backlog's records in the topics the job's first operator reads (its query's `sources`,
    spark_jobs.run_config.read_topics), as Spark's own query reads only the topics it names. `_cost`
    scales the rows read after the first batch back to the backlog's events."""
    from spark_jobs.operator_loader import get_operator
    from spark_jobs.run_config import read_topics

    first = spec.operators[0].partition("=")[2] if spec.operators else spec.operator
    topics = read_topics(spec.input_topic.split(","), get_operator(first).sources(), first)
    return sum(sum(end_offsets(ctx.bootstrap, t, PARTITIONS)) for t in topics)


def _cost(events: int, read: int, after_first: int, span_s: float, batches: int) -> dict[str, Any]:
    """ms per backlog event over the batches after the first (which pays the start-up)."""
    ev = events * after_first / read if read else math.nan
    ms = 1000 * span_s / ev if ev and span_s > 0 else math.nan
    return {"rows_read": read, "batches": batches, "span_s": span_s, "events_timed": ev, "ms_per_event": ms,
            "events_per_s": 1000 / ms if ms == ms and ms > 0 else math.nan}


def _native_one(ctx: Ctx, q: str, prefix: str, events: int, tag: str) -> dict[str, Any]:
    """One query in Spark's own operators, one Spark application (each Ballast job is one: the same
    cold start; a session that ran queries before has a JIT-warm JVM, which only Spark's side had)."""
    P = ctx.profile
    out = ctx.run_dir / "nexmark" / f"native{tag}"
    ensure_topics({f"{prefix}.native.{q}": 2}, ctx.bootstrap)
    p = Proc([PY, "-m", "bench.nexmark_native", "--prefix", prefix, "--bootstrap", ctx.bootstrap, "--queries", q,
              "--checkpoint-root", str(ctx.run_dir / "ckpt" / f"nexmark-native{tag}"), "--progress-dir", str(out),
              "--partitions", str(P.workers), "--max-offsets", str(P.nexmark_max_offsets),
              "--timeout-s", str(P.timeouts_s)], ctx.run_dir / "logs" / f"nexmark-native-{q}{tag}.log",
             f"native NEXMark {q}").start()
    try:
        rc = p.wait(timeout=P.timeouts_s)
    finally:
        p.stop(timeout=60)
    if rc != 0:
        raise RuntimeError(f"native NEXMark {q} failed:\n{p.tail()}")
    err = out / f"{q}.error"
    if err.exists():
        return {"error": err.read_text().strip().splitlines()[-1][:500], "ms_per_event": math.nan}
    prog = [x for x in _read_progress(out / f"{q}.jsonl") if x.get("numInputRows", 0) > 0]
    if not prog:
        return {"error": "no batch read input", "ms_per_event": math.nan}
    read = sum(x["numInputRows"] for x in prog)
    span = _prog_end(prog[-1]) - _prog_end(prog[0]) if len(prog) > 1 else math.nan
    return _cost(events, read, read - prog[0]["numInputRows"], span, len(prog))
