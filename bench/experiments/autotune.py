"""Experiment `autotune` (issue 26): the autotuner against fixed trigger intervals, on a load that
steps up and down, in one run.

The job: Ballast's key count with a fixed CPU cost per record (`bench.slow_ops.SlowKeyCount`,
`row_us` µs), at W = `workers`, so that the workers' share of each second of input (c·λ) moves with
the load the way a real operator's does: at the low rate an epoch is mostly its fixed cost, at the
high rate mostly work. The load: `rates` rows/s, `phase_s` s each, open loop (the same schedule
every run). Runs, one after the other, each a fresh job and topic:

- one per interval in `fixed_ms`: the job keeps its command line's trigger interval throughout;
- one tuned run: it starts at `start_ms`, and every `eval_s` s the bench reads the metrics window
  of the settings in force and calls the controller's own evaluator (`ballast.control.evaluate.assess`,
  DS2 with the jobs file's `latency_goal_ms`, the guards and the tuner's hold), as the rebalance run
  does; a `tune` decision becomes a one-step settings plan (`ballast.policy.settings_plan`), emitted
  through the control plane's emitter and applied by the job live (its streaming query restarts
  in-process on the same checkpoint).

Per run: latency (the answer's Kafka time − the record's scheduled time) over the records
scheduled after the first `warmup_s` s, overall and per phase; the cost per event, CPU seconds of
the job's whole process tree (driver JVM, Python driver, Python workers) from the query's start to
the last answer, per 1 000 records; the epochs it ran. `summarize` turns the runs into the figures
of summary.json's `autotune` (docs/benchmarks.md): p99 over the best fixed interval's, the same
against the fixed intervals that cost no less than the tuned run, cost against the cheapest fixed
interval that met the goal, and the settings changes per load phase (decisions to converge).

`python -m bench.run --smoke --only autotune` (not in the default set nor in `make test`'s smoke
run); sizes: AUTOTUNE_SMOKE / AUTOTUNE_FULL, overridable with `--set 'extra={"autotune": {...}}'`.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from bench import report as rp
from bench.experiments.common import Ctx, own_profile
from bench.experiments.latency import _Ballast, _stats, open_loop
from bench.infra import ensure_topics, unix

OPERATOR_PATH = "bench.slow_ops:SlowKeyCount"


@dataclass
class AutotuneProfile:
    # rows/s per phase, low, high, low: at the high rate the workers spend about half of each second on
    # the input (c·λ ≈ 0.5 on 2 cores with the generator beside the job), at the low one a tenth
    rates: tuple[float, ...] = (100.0, 500.0, 100.0)
    phase_s: float = 40.0
    goal_ms: float = 3000.0  # the job's latency goal (rebalance.latency_goal_ms)
    fixed_ms: tuple[int, ...] = (300, 1000, 1500, 2500)  # the fixed intervals compared
    start_ms: int = 500  # the tuned run's interval at its start
    eval_s: float = 4.0  # how often the tuned run's controller evaluates
    hold_s: float = 15.0  # rebalance.autotune_hold_s
    window_epochs: int = 5  # rebalance.window_epochs
    row_us: float = 600.0  # the operator's CPU per record
    workers: int = 1
    keys: int = 10_000
    bins: int = 64
    max_offsets: int = 20_000  # the command line's maxOffsetsPerTrigger
    warmup_s: float = 8.0  # the first seconds of load are not counted (JIT, Python workers)


AUTOTUNE_SMOKE = AutotuneProfile()
AUTOTUNE_FULL = AutotuneProfile(phase_s=90.0, fixed_ms=(300, 600, 1000, 1500, 2000, 2500), hold_s=20.0)


def profile_for(ctx: Ctx) -> AutotuneProfile:
    return own_profile(ctx, "autotune", AUTOTUNE_SMOKE, AUTOTUNE_FULL)


def exp_autotune(ctx: Ctx) -> dict[str, Any]:
    T = profile_for(ctx)
    out = ctx.run_dir / "autotune"
    out.mkdir(parents=True, exist_ok=True)
    order: list[int | None] = list(T.fixed_ms)
    order.insert(len(order) // 2, None)  # the tuned run amid the fixed ones: drift meets it and them alike
    runs = []
    for i, fixed in enumerate(order):
        r = run_one(ctx, T, i, fixed)
        runs.append(r)
        ctx.log(f"[autotune] {r['label']}: p99 {r['p99_ms']:.0f} ms (phases {[round(p) for p in r['phase_p99_ms']]}), "
                f"{r['cpu_ms_per_1k']:.0f} CPU ms per 1 000 records, {r['epochs']} epochs, "
                f"{len(r['changes'])} settings changes")
    summary = summarize(T, runs)
    rp.write_csv(out / "runs.csv", [{k: r.get(k) for k in RUN_COLUMNS} for r in runs], RUN_COLUMNS)
    rp.write_csv(out / "decisions.csv", [dict(d, run=r["label"]) for r in runs for d in r["decisions"]])
    tuned = next(r for r in runs if r["tuned"])
    t_eps = tuned["epoch_rows"]
    steps_at = [T.phase_s * (k + 1) for k in range(len(T.rates) - 1)]
    rp.plot_series(out / "autotune_timeline.png",
                   {"trigger interval ms": ([e["t_s"] for e in t_eps], [e["trigger_ms"] for e in t_eps]),
                    "epoch ms": ([e["t_s"] for e in t_eps], [e["batch_ms"] for e in t_eps])},
                   f"Tuned run: rates {', '.join(f'{r:.0f}' for r in T.rates)} rows/s, goal {T.goal_ms:.0f} ms", "ms",
                   marks=[(b, "load step") for b in steps_at])
    rp.plot_bars(out / "autotune_runs.png", [r["label"] for r in runs],
                 {"p99 ms": [r["p99_ms"] for r in runs],
                  "CPU ms per 1 000 records": [r["cpu_ms_per_1k"] for r in runs]},
                 "p99 and cost per run (the tuned run red)", colors=["C3" if r["tuned"] else "C0" for r in runs])
    (out / "README.md").write_text(readme(summary))
    ctx.shared["autotune"] = {"summary": summary}
    return {"summary": summary}


RUN_COLUMNS = ("run", "label", "tuned", "job", "p50_ms", "p99_ms", "max_ms", "n", "unanswered", "phase_p99_ms",
               "cpu_s", "cpu_ms_per_1k", "epochs", "records", "final_trigger_ms", "changes_per_phase")


def run_one(ctx: Ctx, T: AutotuneProfile, i: int, fixed_ms: int | None) -> dict[str, Any]:
    """One run: a fresh job and topic, the stepped open loop, every row answered, stop; tuned when
    `fixed_ms` is None."""
    label = f"at-{i}-{'tuned' if fixed_ms is None else f'fixed{fixed_ms}'}"
    topic = ctx.name(label) + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    trigger = T.start_ms if fixed_ms is None else fixed_ms
    job = _Metered(ctx, label, topic, trigger, bins=T.bins, max_offsets=T.max_offsets, workers=T.workers,
                   operator="slowcount", operator_path=OPERATOR_PATH, env={"BALLAST_BENCH_ROW_US": str(T.row_us)})
    rates = ",".join(f"{r}:{T.phase_s}" for r in T.rates)
    tuner = job.tuner = Tuner(T, job, topic, trigger) if fixed_ms is None else None
    try:
        _, sched, _ = open_loop(ctx, job, topic, T.keys, rates, label, trigger)
        cpu_s = job.cpu.stop()
    finally:
        if tuner is not None:
            tuner.stop()
        job.stop()
    lat = job.latencies(sched)
    sched_t = lat.t_out - lat.lat_ms / 1000.0  # each record's scheduled time
    counted = sched_t >= sched.t0 + T.warmup_s
    phase_p99 = []
    for k in range(len(T.rates)):
        a, b = sched.t0 + k * T.phase_s, sched.t0 + (k + 1) * T.phase_s
        sel = counted & (sched_t >= a) & (sched_t < b)
        phase_p99.append(_stats(lat.lat_ms[sel])["p99_ms"])
    eps = job.job.epochs()
    changes = tuner.changes if tuner else []
    trig = _trigger_at(trigger, changes)
    epoch_rows = [{"t_s": unix(e.started_at) - sched.t0, "epoch": e.epoch, "batch_ms": e.batch_ms,
                   "input_rows": e.input_rows, "trigger_ms": trig(unix(e.started_at))} for e in eps]
    rp.write_csv(ctx.run_dir / "autotune" / f"{label}.epochs.csv", epoch_rows)
    records = int(sum(T.rates) * T.phase_s)
    return {"run": i, "label": label, "tuned": fixed_ms is None, "job": job.spec.job, "trigger_ms": trigger,
            **_stats(lat.lat_ms[counted]), "unanswered": lat.unanswered, "phase_p99_ms": phase_p99,
            "cpu_s": cpu_s, "cpu_ms_per_1k": 1e6 * cpu_s / records if records else math.nan,
            "epochs": sum(1 for e in eps if unix(e.started_at) >= sched.t0), "records": records,
            "final_trigger_ms": trig(math.inf), "changes": changes,
            "changes_per_phase": changes_per_phase([c["t_emit"] - sched.t0 for c in changes], T.phase_s, len(T.rates)),
            "decisions": [dict(d, t_s=d["t"] - sched.t0) for d in (tuner.decisions if tuner else [])],
            "epoch_rows": epoch_rows}


class _Metered(_Ballast):
    """The run's job: once its query has started (open_loop's `start` returns then), its CPU meter
    and, in the tuned run, its controller start."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cpu = CpuMeter()
        self.tuner: Tuner | None = None

    def start(self) -> float:
        t = super().start()
        assert self.job.proc is not None
        self.cpu.start(self.job.proc.pid)
        if self.tuner is not None:
            self.tuner.start()
        return t


def _trigger_at(start_ms: int, changes: list[dict[str, Any]]) -> Any:
    """The interval in force at unix time t, from the applied changes (each with `t_applied`)."""
    def at(t: float) -> int:
        now = start_ms
        for c in changes:
            if c["t_applied"] <= t:
                now = c["trigger_ms"]
        return now
    return at


def changes_per_phase(t_s: list[float], phase_s: float, phases: int) -> list[int]:
    """How many settings changes were emitted in each load phase (times from the load's start)."""
    out = [0] * phases
    for t in t_s:
        out[min(phases - 1, max(0, int(t // phase_s)))] += 1
    return out


class CpuMeter:
    """CPU seconds (user + system) of a process and all its descendants, the ones that ended while
    measured included (each process's reaped children's times)."""

    def __init__(self) -> None:
        self.pid = 0
        self.t0 = 0.0

    @staticmethod
    def tree_cpu_s(pid: int) -> float:
        import psutil

        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0.0
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system + t.children_user + t.children_system
        return total

    def start(self, pid: int) -> None:
        self.pid, self.t0 = pid, self.tree_cpu_s(pid)

    def stop(self) -> float:
        return self.tree_cpu_s(self.pid) - self.t0 if self.pid else math.nan


class Tuner:
    """The tuned run's controller: every `eval_s` s the controller's evaluator on the metrics window of
    the settings in force; a `tune` decision is planned, emitted and awaited (its step checkpoint)."""

    def __init__(self, T: AutotuneProfile, job: _Ballast, topic: str, start_ms: int) -> None:
        from ballast.config import JobConfig, RebalanceConfig

        self.T, self.job = T, job
        self.trigger_ms, self.cap = start_ms, T.max_offsets
        self.cfg = JobConfig(
            job=job.spec.job, operator=OPERATOR_PATH, input_topic=topic, bins=T.bins, min_workers=T.workers,
            max_workers=T.workers, rebalance=RebalanceConfig(
                window_epochs=T.window_epochs, model="microbatch", batch_budget_s=start_ms / 1000,
                latency_goal_ms=T.goal_ms, autotune_hold_s=T.hold_s, warmup_s=0.0, warmup_epochs=0))
        self.decisions: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, name="autotune-controller", daemon=True)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join(timeout=120)
        if self.error is not None:
            raise RuntimeError(f"the tuned run's controller failed: {self.error}") from self.error

    def _loop(self) -> None:
        from ballast import policy

        state = policy.GuardState()
        try:
            while not self._stop.wait(self.T.eval_s):
                state = self.step(state)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def step(self, state: Any) -> Any:
        """One evaluation (and, on `tune`, one settings plan run to its checkpoint); the guards' state after."""
        from ballast import policy
        from ballast.control.evaluate import assess
        from ballast.protocol import Settings

        job = self.job.job
        ver, cur, assignment = job.current_map()
        # the settings in force since the map version: its first epoch restarted the query, not counted
        eps = [e for e in job.epochs_tail(4 * self.T.window_epochs) if e.map_version == ver and e.input_rows > 0]
        eps = eps[1:][-self.T.window_epochs:]
        if len(eps) < 3:
            return state
        snap = job.snapshot(eps, ver, cur, assignment, trigger_ms=self.trigger_ms, max_records_per_epoch=self.cap)
        now = time.time()
        dec = assess(self.cfg, snap, state, datetime.fromtimestamp(now, UTC))
        state = dec.state
        self.decisions.append({"t": now, "epoch": eps[-1].epoch, "action": dec.action, "trigger_ms": self.trigger_ms,
                               "advised_ms": dec.inputs.get("tune.trigger_ms"),
                               "predicted_p99_ms": dec.inputs.get("tune.predicted_p99_ms"),
                               "rate": dec.inputs.get("ds2.source_rate"),
                               "overhead_s": dec.inputs.get("ds2.overhead_s"),
                               "reason": dec.reason})
        if dec.action != "tune" or not dec.settings:
            return state
        new = Settings(**dec.settings)
        plan = policy.settings_plan(ver, cur, new)
        pid = f"bench-autotune-{uuid.uuid4().hex[:8]}"
        t_emit = job.emit(list(plan.steps), pid, reason=f"autotune: {dec.reason}")
        cps = job.wait_plan(pid, 1, 300)
        t_done = max(unix(c.completed_at) for c in cps)
        self.changes.append({"t_emit": t_emit, "t_applied": min(unix(c.applied_at) for c in cps),
                             "from_ms": self.trigger_ms,
                             "trigger_ms": new.trigger_ms, "max_records_per_epoch": new.max_records_per_epoch,
                             "epoch": cps[0].applied_epoch})
        self.trigger_ms = new.trigger_ms if new.trigger_ms is not None else self.trigger_ms
        self.cap = new.max_records_per_epoch if new.max_records_per_epoch is not None else self.cap
        return policy.record_change(state, t_done, cps[0].applied_epoch, cur, cur, dec.true_rate)


def summarize(T: AutotuneProfile, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """summary.json's `autotune`. Pure: the runs' figures in, the ratios out.

    - `p99_over_best_fixed`: the tuned run's p99 over the lowest p99 of any fixed interval (the
      issue's figure; the lowest p99 is bought with the most epochs, see docs/benchmarks.md);
    - `p99_over_best_fixed_at_cost`: the same against only the fixed intervals that cost no less
      per record than the tuned run (within 5 %): at a matched budget, which batches better;
    - `cost_over_cheapest_fixed_within_goal`: the tuned run's CPU per record over the cheapest fixed
      interval whose p99 met the goal in every phase (what the tuner is for: the goal at the least cost);
    - `decisions_to_converge_max`: the most settings changes in one load phase."""
    nan = math.nan
    tuned = next((r for r in runs if r["tuned"]), None)
    fixed = [r for r in runs if not r["tuned"] and r["p99_ms"] == r["p99_ms"]]
    s: dict[str, Any] = {"profile": asdict(T), "goal_ms": T.goal_ms,
                         "runs": [{k: r.get(k) for k in RUN_COLUMNS} for r in runs]}
    if tuned is None or not fixed:
        return {**s, "p99_over_best_fixed": nan, "p99_over_best_fixed_at_cost": nan,
                "cost_over_cheapest_fixed_within_goal": nan, "decisions_to_converge_max": None}
    best = min(fixed, key=lambda r: r["p99_ms"])
    at_cost = [r for r in fixed if r["cpu_ms_per_1k"] >= tuned["cpu_ms_per_1k"] / 1.05]
    best_at_cost = min(at_cost, key=lambda r: r["p99_ms"]) if at_cost else None
    within = [r for r in fixed if all(p <= T.goal_ms for p in r["phase_p99_ms"] if p == p)]
    cheapest = min(within, key=lambda r: r["cpu_ms_per_1k"]) if within else None
    per_phase = tuned["changes_per_phase"]
    return {**s,
            "tuned_p99_ms": tuned["p99_ms"], "tuned_phase_p99_ms": tuned["phase_p99_ms"],
            "tuned_cpu_ms_per_1k": tuned["cpu_ms_per_1k"],
            "tuned_meets_goal": all(p <= T.goal_ms for p in tuned["phase_p99_ms"] if p == p),
            "best_fixed_ms": best["trigger_ms"], "best_fixed_p99_ms": best["p99_ms"],
            "p99_over_best_fixed": tuned["p99_ms"] / best["p99_ms"],
            "cost_over_best_fixed": tuned["cpu_ms_per_1k"] / best["cpu_ms_per_1k"],
            "best_fixed_at_cost_ms": best_at_cost["trigger_ms"] if best_at_cost else None,
            "p99_over_best_fixed_at_cost": tuned["p99_ms"] / best_at_cost["p99_ms"] if best_at_cost else nan,
            "cheapest_fixed_within_goal_ms": cheapest["trigger_ms"] if cheapest else None,
            "cost_over_cheapest_fixed_within_goal":
                tuned["cpu_ms_per_1k"] / cheapest["cpu_ms_per_1k"] if cheapest else nan,
            "decisions_per_phase": per_phase, "decisions_to_converge_max": max(per_phase) if per_phase else 0,
            "tuned_settings": [{k: c[k] for k in ("from_ms", "trigger_ms", "max_records_per_epoch", "epoch")}
                               for c in tuned["changes"]]}


def _ms(v: Any) -> str:
    return "–" if v is None or v != v else f"{v:,.0f}"


def readme(s: dict[str, Any]) -> str:
    """The experiment's README.md (its first two lines are the title; REPORT.md takes the rest)."""
    T = s["profile"]
    rows = [dict(r, phase_p99_ms=" / ".join(_ms(p) for p in r["phase_p99_ms"]),
                 label=("**tuned**" if r["tuned"] else f"fixed {r['label'].rsplit('fixed', 1)[-1]} ms"))
            for r in s["runs"]]
    rates = ", ".join(f"{r:.0f}" for r in T["rates"])
    return "\n".join([
        "# Autotuning against fixed trigger intervals", "",
        f"Key count with {T['row_us']:.0f} µs of CPU per record (`bench.slow_ops`), W={T['workers']}, B={T['bins']}; "
        f"open loop {rates} rows/s, {T['phase_s']:.0f} s each; latency goal {T['goal_ms']:.0f} ms; the tuned run "
        f"starts at {T['start_ms']} ms and its controller evaluates every {T['eval_s']:.0f} s (hold "
        f"{T['hold_s']:.0f} s, window {T['window_epochs']} epochs). Latency over the records scheduled after the "
        f"first {T['warmup_s']:.0f} s; cost = CPU of the job's whole process tree per 1 000 records.", "",
        rp.md_table(rows, ["label", "p50_ms", "p99_ms", "phase_p99_ms", "cpu_ms_per_1k", "epochs",
                           "final_trigger_ms", "changes_per_phase", "unanswered"]), "",
        f"- tuned p99 ÷ the best fixed interval's ({_ms(s.get('best_fixed_ms'))} ms): "
        f"**{s.get('p99_over_best_fixed', math.nan):.2f}**, at "
        f"{s.get('cost_over_best_fixed', math.nan):.2f}× its cost;",
        f"- tuned p99 ÷ the best fixed interval costing at least as much per record "
        f"({_ms(s.get('best_fixed_at_cost_ms'))} ms): **{s.get('p99_over_best_fixed_at_cost', math.nan):.2f}**;",
        f"- tuned cost ÷ the cheapest fixed interval that met the goal in every phase "
        f"({_ms(s.get('cheapest_fixed_within_goal_ms'))} ms): "
        f"**{s.get('cost_over_cheapest_fixed_within_goal', math.nan):.2f}**; the tuned run met the goal in every "
        f"phase: {s.get('tuned_meets_goal')};",
        f"- settings changes per load phase: {s.get('decisions_per_phase')} (max "
        f"**{s.get('decisions_to_converge_max')}**); the changes: {s.get('tuned_settings')}.", "",
        "![](autotune_timeline.png)", "", "![](autotune_runs.png)", ""])
