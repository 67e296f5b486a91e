"""What every experiment shares: the profile (SMOKE / FULL), the run context, the prefill and the
open-loop generator, catch-up throughput, waiting for a steady job, Spark progress files.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from bench.ballast_job import BallastJob
from bench.infra import PY, Proc, unix, wait_until

STRATEGIES = ("all-at-once", "fluid", "batched", "batched-gap")
T = TypeVar("T")


@dataclass
class Profile:
    name: str
    # experiment 1
    keys: int = 200_000
    bins: tuple[int, ...] = (64,)
    workers: int = 2
    rate: float = 1000.0
    strategies: tuple[str, ...] = STRATEGIES
    batch_steps: int = 4  # batched: the moving bins cut into this many steps
    gap_s: float = 2.0
    steady_s: float = 5.0
    settle_s: float = 3.0
    # how long a migration waits for the job to keep up before it starts anyway (`wait_steady`)
    steady_timeout_s: float = 180.0
    trigger_ms: int = 500
    catchup_max_offsets: int = 20_000
    # experiment 2
    bins_sweep: tuple[int, ...] = (1, 64)  # 64 is experiment 1's session, reused
    sweep_keys: int = 200_000
    sweep_strategies: tuple[str, ...] = ("all-at-once", "batched", "fluid")
    sweep_max_steps: int = 8  # fluid/batched steps measured per point (duration extrapolated past it)
    # experiment 3
    reconfig_to_workers: int = 4
    native_trigger_ms: int = 500
    native_reconfig_keys: int | None = None  # keys of the stop/repartition/restart run (None: `keys`)
    # experiment 4
    ds2_keys: int = 10_000
    ds2_bins: int = 64
    ds2_phase_s: tuple[float, float, float] = (25.0, 40.0, 40.0)
    ds2_trigger_ms: int = 1000
    ds2_eval_s: float = 3.0
    ds2_rate: float | None = None  # None: calibrated from experiment 1's measured per-worker rate
    ds2_max_rate: float = 1500.0  # the Python generator's comfortable ceiling (2x this is sent)
    # word count, sentences of this many words: each Kafka row is `ds2_words` records of work, so the
    # rate that needs a second worker stays within what one Python generator sends on 2 cores
    ds2_words: int = 10
    ds2_probe_s: float = 15.0  # calibration at W=1 before the measured schedule
    # latency side by side (Spark native vs Ballast, same open-loop input): one job per system and
    # trigger runs the rates one after the other, then is stopped, a backlog written, and restarted
    latency_rates: tuple[float, ...] = (1000.0,)
    latency_segment_s: float = 20.0  # seconds per rate
    latency_triggers: tuple[int, ...] = (500,)  # 0: as fast as possible
    latency_keys: int = 10_000
    latency_bins: int = 64
    latency_first_s: float = 10.0  # "the first minute after start" (full: 60 s)
    latency_backlog_rows: int = 20_000  # written while the job is stopped: the restart's catch-up
    latency_max_offsets: int = 5_000  # maxOffsetsPerTrigger of both jobs
    # NEXMark (issue 10): migrations on the state-heavy queries, cost per event against Spark's own operators
    nexmark_migration_queries: tuple[str, ...] = ("q8",)
    # events/s, open loop, while the state builds and during the migrations; None: 0.6 x what the query's
    # Ballast job sustained on the backlog (its state grows with the rate), at most nexmark_max_rate
    nexmark_rate: float | None = 1000.0
    nexmark_max_rate: float = 4000.0  # the Python writer's ceiling next to a job on 2 cores (--pregenerate)
    nexmark_fill_s: float = 12.0
    nexmark_pregenerate: bool = False  # the writer holds ~1.6k events/s without it on a busy machine
    nexmark_bins: int = 64
    nexmark_max_offsets: int = 5_000  # events per batch, both systems
    nexmark_cost_queries: tuple[str, ...] = ("q5",)
    nexmark_backlog_events: int = 30_000
    nexmark_backlog_rate: float = 10_000.0  # events/s the backlog is written at
    nexmark_backlog_event_rate: float = 1000.0  # events/s of event time in it: windows close, auctions expire
    nexmark_cost_trigger_ms: int = 0  # Ballast's batches back to back, as Spark's availableNow
    nexmark_cost_rounds: int = 1  # paired rounds (native and Ballast back to back); the ratio is their median
    timeouts_s: float = 900.0
    # after experiment 1, run bench.run.LANES side by side (one thread each) instead of one after the
    # other: the smoke's shape checks are counts and signs, which contention cannot reverse; a full
    # run's figures are times, measured one experiment at a time
    lanes: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


# The smoke (inside `make test`, tests/bench/test_smoke.py) checks shapes and counts, never times: its windows
# and waits are as short as still measure every figure (a few seconds of steady load at 1 000 rows/s are
# thousands of records), and the sizes that decide a shape stay (experiment 1's 200 k keys: all-at-once's
# pause must stand out from a batched step's at smoke scale)
SMOKE = Profile(
    # steady_timeout_s: beside the suite on 2 cores the job's epochs take 1-4 s, and one that falls behind
    # must not hold the smoke for 180 s; its shapes do not need a steady start (a CI run waited 2 x 180 s)
    name="smoke", steady_s=3.0, settle_s=2.0, gap_s=1.0, catchup_max_offsets=50_000, steady_timeout_s=30.0,
    native_reconfig_keys=50_000,
    ds2_phase_s=(10.0, 15.0, 15.0), ds2_probe_s=8.0,
    latency_segment_s=12.0, latency_first_s=6.0,
    nexmark_fill_s=6.0, nexmark_backlog_events=20_000, lanes=True,
)
FULL = Profile(
    name="full", keys=2_000_000, bins=(256, 1024), rate=5_000.0, batch_steps=8, gap_s=2.0, steady_s=10.0,
    settle_s=4.0, catchup_max_offsets=200_000, bins_sweep=(1, 16, 64, 256, 1024, 4096), sweep_keys=400_000,
    sweep_max_steps=32, ds2_keys=50_000, ds2_bins=256, ds2_phase_s=(60.0, 90.0, 90.0), ds2_max_rate=3000.0,
    timeouts_s=3600.0, latency_rates=(1000.0, 5000.0, 10000.0), latency_segment_s=60.0, latency_triggers=(0, 500),
    latency_keys=100_000, latency_bins=256, latency_first_s=60.0, latency_backlog_rows=200_000,
    latency_max_offsets=20_000,
    # measured on the reference machine (bench/REPORT.md, run full-2-ds2c): one worker sustains ~1.9k
    # sentences/s, so 2k → 4k → 2k exercises 1 → 2 → 1; the probe's estimate (950) needed no scaling
    ds2_rate=2000.0,
    nexmark_migration_queries=("q4", "q5", "q8"), nexmark_rate=None, nexmark_fill_s=90.0, nexmark_pregenerate=True,
    nexmark_bins=256, nexmark_max_offsets=20_000, nexmark_cost_queries=("q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8"),
    nexmark_backlog_events=400_000, nexmark_backlog_event_rate=2000.0, nexmark_cost_rounds=3,
)


def own_profile(ctx: Ctx, name: str, smoke: T, full: T) -> T:
    """An experiment's own profile (a dataclass): `full` in a full run, else `smoke`, with the fields
    given in `--set 'extra={"<name>": {...}}'` replaced (lists become tuples)."""
    base = full if ctx.profile.name == "full" else smoke
    over = {k: tuple(v) if isinstance(v, list) else v for k, v in (ctx.profile.extra or {}).get(name, {}).items()}
    bad = [k for k in over if not hasattr(base, k)]
    if bad:
        raise ValueError(f"unknown {name} profile field(s) {bad}")
    return replace(base, **over)  # type: ignore[type-var]


@dataclass
class Ctx:
    run_id: str
    run_dir: Path
    bootstrap: str
    db_url: str
    profile: Profile
    log: Any = print
    shared: dict[str, Any] = field(default_factory=dict)

    def name(self, label: str) -> str:
        return job_name(self.run_id, label)


def job_name(run_id: str, label: str) -> str:
    """A bench job's name: `bench-<run id>-<label>` (bench.cp_summary strips the prefix to line runs up)."""
    return f"bench-{run_id}-{label}".replace("_", "-")


def _prefill(ctx: Ctx, topic: str, keys: int, words: int = 0) -> int:
    """Every key once; returns the records written (⌈keys/words⌉ sentences with `words`)."""
    p = Proc([PY, "-m", "bench.loadgen", "--bootstrap", ctx.bootstrap, "--topic", topic, "--partitions", "2",
              "--keys", str(keys), "--words", str(words), "--prefill"],
             ctx.run_dir / "logs" / f"{topic}.prefill.log", "prefill").start()
    rc = p.wait(timeout=ctx.profile.timeouts_s)
    if rc != 0:
        raise RuntimeError(f"prefill of {topic} failed:\n{p.tail()}")
    return -(-keys // words) if words else keys


def _start_gen(ctx: Ctx, topic: str, keys: int, rate_spec: str, label: str, dist: str = "uniform",
               words: int = 0) -> tuple[Proc, Path]:
    sched = ctx.run_dir / "data" / f"{label}.schedule.json"
    sched.parent.mkdir(parents=True, exist_ok=True)
    p = Proc([PY, "-m", "bench.loadgen", "--bootstrap", ctx.bootstrap, "--topic", topic, "--partitions", "2",
              "--keys", str(keys), "--rate", rate_spec, "--dist", dist, "--words", str(words),
              "--schedule-out", str(sched)],
             ctx.run_dir / "logs" / f"{label}.loadgen.log", "load generator").start()
    wait_until(sched.exists, 60, "the load generator's schedule", proc=p)
    return p, sched


def _gen_stats(sched: Path) -> dict[str, Any]:
    return json.loads(sched.read_text()).get("stats", {})


def catchup_rate(job: BallastJob, rows_wanted: int) -> dict[str, float]:
    """Throughput of the catch-up (prefill) phase: epochs >= 1 (epoch 0 pays JVM/Python warm-up)."""
    eps = [e for e in job.epochs() if e.input_rows > 0]
    acc, used = 0, []
    for e in eps:
        if acc >= rows_wanted:
            break
        acc += e.input_rows
        used.append(e)
    body = used[1:] if len(used) > 1 else used
    if not body:
        return {"rows_per_s": math.nan, "batch_ms_per_1k_rows": math.nan}
    rows = sum(e.input_rows for e in body)
    wall = unix(body[-1].ended_at) - unix(used[0].ended_at) if len(used) > 1 else sum(e.batch_ms for e in body) / 1e3
    wk = job.worker_rows([e.epoch for e in body])
    useful = sum(w.useful_ms for w in wk)
    return {"rows": rows, "rows_per_s": rows / wall if wall > 0 else math.nan,
            "batch_ms_per_1k_rows": 1000 * sum(e.batch_ms for e in body) / rows,
            "useful_us_per_row": 1000 * useful / max(1, sum(w.records_in for w in wk)),
            "per_worker_rows_per_useful_s": sum(w.records_in for w in wk) / (useful / 1000) if useful else math.nan,
            "epochs": len(body)}


def keeps_up(tail: list[tuple[float, int | None]], rate: float, trigger_ms: int) -> bool:
    """`wait_steady`'s rule on the last 3 epochs' (batch ms, backlog rows)."""
    if len(tail) < 3:
        return False
    per_epoch_s = max(trigger_ms, statistics.median(ms for ms, _ in tail)) / 1000
    return all((backlog or 0) <= max(2 * rate * per_epoch_s, 200) for _, backlog in tail)


def wait_steady(ctx: Ctx, job: BallastJob, rate: float, min_s: float, timeout_s: float | None = None) -> bool:
    """Sleep `min_s`, then until the job keeps up: each of the last 3 epochs ended with at most two
    epochs' worth of input waiting (an epoch: the trigger, or the median of those 3 when longer — a
    job on a shared machine whose epochs outlast the trigger keeps up with a backlog of one epoch's
    input, and a trigger's worth would never be met; on a quiet machine both are the trigger). Returns
    False (and logs) if it never got there: that migration then starts from a backlog, which the
    results table shows as a high steady p99. `timeout_s`: the profile's `steady_timeout_s` unless given."""
    time.sleep(min_s)
    timeout_s = ctx.profile.steady_timeout_s if timeout_s is None else timeout_s
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if keeps_up([(e.batch_ms, e.backlog) for e in job.epochs_tail(3)], rate, job.spec.trigger_ms):
            return True
        time.sleep(0.5)
    ctx.log(f"[{job.spec.job}] not steady after {timeout_s:.0f}s; migrating anyway")
    return False


def _read_progress(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _prog_end(p: dict[str, Any]) -> float:
    from datetime import datetime

    t = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
    return t + p.get("durationMs", {}).get("triggerExecution", 0) / 1000.0


def session_result(ctx: Ctx, name: str, r: dict[str, Any], summary: dict[str, Any], readme: str) -> dict[str, Any]:
    """An experiment's files (`<name>/README.md`, `<name>/result.json`) and its result for summary.json."""
    from bench import report as rp

    out = ctx.run_dir / name
    (out / "README.md").write_text(readme)
    (out / "result.json").write_text(json.dumps(rp.clean(r), indent=1))
    res = {"summary": summary}
    ctx.shared[name] = res
    return res
