"""Reaction to a load step, event-driven vs the schedule (issue 27 item 1), in one run.

The stack's real Airflow standalone (`scripts/stack.py up airflow`, in the run's own state dir and
on free ports, PLAINTEXT Kafka, unsigned control steps) runs the rebalance DAGs of two identical
word-count jobs under the same cron: job `sched` with `signal_epochs: 0` (the cron only) and job
`event` with signals on (the cron or the job's signal through the asset watcher). The bench starts
both jobs itself (W=1, max 2) on ONE input topic, so both see the very same input: a steady rate
one worker keeps, then — once both DAGs are parsed, the warm-up is over and no plan was made —
a step to a rate one worker cannot keep. Measured per job: step → the first plan step emitted
(plan_steps.emitted_at in the metrics DB). `event_over_schedule` = event ÷ schedule.

A single sample: the schedule's figure is mostly where the step fell in the cron interval, so the
result also gives the wait to the next tick and the expected schedule reaction (half an interval
+ the DAG's own time from its start to the emitted step).
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from ballast import dag_ids
from bench import report as rp
from bench.ballast_job import BallastJob, JobSpec
from bench.experiments.common import Ctx, _start_gen, own_profile
from bench.infra import REPO, Proc, ensure_topics, unix

STACK = REPO / "scripts" / "stack.py"


@dataclass
class ReactionProfile:
    cron_minutes: int = 2  # schedules.rebalance = */N * * * *
    bins: int = 16
    words: int = 20  # word count: each row is this many records of work
    keys: int = 10_000
    trigger_ms: int = 2000
    # DS2's batch budget and the signals' busy measure: on a loaded 2-core machine an epoch's fixed cost
    # alone is 1.3-1.7 s (run reaction-1's first try), so the micro-batch model needs room above it
    batch_budget_s: float = 4.0
    max_offsets: int = 6000  # rows per epoch: 120 k words, several seconds of one worker's work
    base_rate: float = 60.0  # rows/s one worker keeps
    step_rate: float = 1200.0  # rows/s one worker cannot keep
    signal_epochs: int = 3
    signal_hold_s: float = 30.0
    warm_s: float = 45.0  # after the DAGs are parsed: the watcher subscribes, the jobs settle
    timeout_s: float = 420.0  # step → both plans emitted, at most
    applied_wait_s: float = 90.0  # then, for context: until both ran an epoch at W=2


REACTION_SMOKE = ReactionProfile()
REACTION_FULL = ReactionProfile()


# ----------------------------------------------------------------------------- pure helpers


def next_tick(t: float, minutes: int) -> float:
    """The first cron tick of `*/minutes * * * *` (UTC) strictly after unix time `t`."""
    step = 60 * minutes
    # */N in the minute field: minutes 0, N, 2N, ... of each hour (N divides 60 in practice)
    hour = math.floor(t / 3600) * 3600
    k = math.floor((t - hour) / step) + 1
    tick = hour + k * step
    return tick if tick - hour < 3600 else hour + 3600


def reaction_summary(t_step: float, first_emit: dict[str, float | None], dag_run_s: dict[str, float | None],
                     cron_minutes: int) -> dict[str, Any]:
    """The figures of summary.json from unix times: the step, each job's first emitted plan step
    (`event`, `schedule`; None = none within the timeout) and each DAG run's start → emitted step."""
    nan = math.nan

    def since(t: float | None) -> float:
        return t - t_step if t is not None else nan

    ev, sc = since(first_emit.get("event")), since(first_emit.get("schedule"))
    wait = next_tick(t_step, cron_minutes) - t_step
    run_s = dag_run_s.get("schedule")
    run_s = run_s if run_s is not None else nan
    return {"event_s": ev, "schedule_s": sc,
            "event_over_schedule": ev / sc if sc == sc and sc > 0 and ev == ev else nan,
            "schedule_tick_wait_s": wait, "schedule_dag_run_s": run_s,
            "event_dag_run_s": dag_run_s.get("event") if dag_run_s.get("event") is not None else nan,
            # where the step falls in the interval is uniform: half an interval on average
            "schedule_expected_s": 30.0 * cron_minutes + run_s,
            "schedule_worst_s": 60.0 * cron_minutes + run_s,
            "cron": f"*/{cron_minutes} * * * *"}


# ----------------------------------------------------------------------------- Airflow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def jobs_doc(jobs: dict[str, dict[str, Any]], cron: str) -> dict[str, Any]:
    """The jobs file: supervise never scheduled (the bench starts the jobs), rebalance on `cron`."""
    return {"schedules": {"supervise": None, "rebalance": cron}, "jobs": list(jobs.values())}


def airflow_env(base: Path, jobs_file: Path, db_path: Path, bootstrap: str) -> dict[str, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_HOME"))}
    env.update({
        "BALLAST_STATE_DIR": str(base / "state"), "BALLAST_AIRFLOW_PORT": str(port),
        "BALLAST_KAFKA_AUTH": "none", "BALLAST_CONTROL_SIGNING": "none",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "BALLAST_JOBS_FILE": str(jobs_file), "BALLAST_KAFKA_BOOTSTRAP": bootstrap,
        "BALLAST_DB_URL": f"sqlite:///{db_path}",
        "AIRFLOW_CONN_BALLAST_METRICS_DB": json.dumps({"conn_type": "sqlite", "host": str(db_path)}),
    })
    return env


class Api:
    def __init__(self, port: int) -> None:
        self.root = f"http://127.0.0.1:{port}"
        self._token: str | None = None

    def token(self) -> str:
        if self._token is None:
            from ballast.options import settings

            pw = settings().airflow_password
            body = json.dumps({"username": "admin", "password": pw}).encode()
            req = urllib.request.Request(f"{self.root}/auth/token", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                self._token = str(json.load(r)["access_token"])
        return self._token

    def get(self, path: str) -> tuple[int, Any]:
        req = urllib.request.Request(f"{self.root}{path}", headers={"Accept": "application/json",
                                                                      "Authorization": f"Bearer {self.token()}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as exc:
            return exc.code, None
        except (TimeoutError, urllib.error.URLError, ConnectionError) as exc:
            return 0, str(exc)

    def runs(self, dag: str) -> list[dict[str, Any]]:
        code, body = self.get(f"/api/v2/dags/{dag}/dagRuns?order_by=-run_after&limit=50")
        return list(body.get("dag_runs", [])) if code == 200 and isinstance(body, dict) else []


def _ts(s: str | None) -> float | None:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp() if s else None


def signal_times(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """Every record of `<job>.signals`: its Kafka time and the signal's reason/epoch."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out = []
        for msg in c:
            try:
                doc = json.loads(msg.value)
            except ValueError:
                doc = {}
            out.append({"t": msg.timestamp / 1000.0, "reason": doc.get("reason"), "epoch": doc.get("epoch"),
                        "detail": doc.get("detail")})
        return out
    finally:
        c.close()


def first_emitted(db_url: str, job: str) -> tuple[float | None, str | None]:
    """The earliest emitted step of any plan of `job` (unix s) and its plan id."""
    from ballast import store

    best: tuple[float | None, str | None] = (None, None)
    for p in store.recent_plans(db_url, job=job):
        for st in store.plan_steps(db_url, p.plan_id):
            if st.emitted_at is not None and (best[0] is None or unix(st.emitted_at) < best[0]):
                best = (unix(st.emitted_at), p.plan_id)
    return best


# ----------------------------------------------------------------------------- the experiment


def exp_reaction(ctx: Ctx) -> dict[str, Any]:
    from ballast.config import JobConfig
    from ballast.emitter import ensure_control_topics
    from ballast.supervisor import signal_args

    P = own_profile(ctx, "reaction", REACTION_SMOKE, REACTION_FULL)
    out = ctx.run_dir / "reaction"
    out.mkdir(parents=True, exist_ok=True)
    base = ctx.run_dir / "reaction-airflow"
    base.mkdir(parents=True, exist_ok=True)
    db_path = Path(ctx.db_url.removeprefix("sqlite:///"))
    topic = ctx.name("reaction") + "-in"
    ensure_topics({topic: 2}, ctx.bootstrap)
    cron = f"*/{P.cron_minutes} * * * *"
    rebalance = {"window_epochs": 3, "warmup_s": 0, "warmup_epochs": 0, "activation": 1, "strategy": "batched",
                 "emit_mode": "flow-control", "batch_budget_s": P.batch_budget_s, "catch_up_s": 30.0,
                 "target_utilization": 0.5, "utilization_band": 0.2, "poll_interval_s": 0.5,
                 "await_timeout_s": 300, "signal_hold_s": P.signal_hold_s}
    names = {"schedule": ctx.name("react-sched"), "event": ctx.name("react-event")}
    entries = {role: {"job": job, "operator": "wordcount", "input_topic": topic, "bins": P.bins,
                      "initial_workers": 1, "min_workers": 1, "max_workers": 2,
                      "checkpoint_dir": str(ctx.run_dir / "ckpt" / job),
                      "rebalance": {**rebalance, "signal_epochs": 0 if role == "schedule" else P.signal_epochs}}
               for role, job in names.items()}
    jobs_file = base / "jobs.yaml"
    jobs_file.write_text(yaml.safe_dump(jobs_doc(entries, cron), sort_keys=False))
    cfgs = {role: JobConfig.model_validate(e) for role, e in entries.items()}
    for job in names.values():
        ensure_control_topics(ctx.bootstrap, job)
    env = airflow_env(base, jobs_file, db_path, ctx.bootstrap)
    api = Api(int(env["BALLAST_AIRFLOW_PORT"]))
    jobs = {role: BallastJob(JobSpec(job=job, input_topic=topic, bins=P.bins, workers=1, db_url=ctx.db_url,
                                     bootstrap=ctx.bootstrap, run_dir=ctx.run_dir, trigger_ms=P.trigger_ms,
                                     max_offsets_per_trigger=P.max_offsets, operator="wordcount",
                                     env={"BALLAST_CONTROL_SIGNING": "none"},
                                     extra_args=tuple(signal_args(cfgs[role]))))
            for role, job in names.items()}
    gens: list[Proc] = []
    airflow_started = False
    res: dict[str, Any] = {"profile": P.__dict__, "jobs": names, "cron": cron}
    t_begin = time.time()  # a re-run on the same broker finds the earlier run's signals on the topic
    try:
        for j in jobs.values():
            j.start()
        base_gen, _ = _start_gen(ctx, topic, P.keys, f"{P.base_rate}:{3 * P.timeout_s + 1200}", "reaction-base",
                                 words=P.words)
        gens.append(base_gen)
        t0 = time.time()
        ctx.log(f"[reaction] starting Airflow on :{env['BALLAST_AIRFLOW_PORT']} (state {base / 'state'})")
        airflow_started = True
        r = subprocess.run([sys.executable, str(STACK), "up", "airflow"], env=env, capture_output=True, text=True,
                           timeout=600, cwd=REPO)
        if r.returncode != 0:
            raise RuntimeError(f"stack.py up airflow failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        ctx.log(f"[reaction] Airflow up in {time.time() - t0:.0f}s")
        dags = {role: dag_ids.rebalance(job) for role, job in names.items()}
        deadline = time.time() + 420
        while not all(api.get(f"/api/v2/dags/{d}")[0] == 200 for d in dags.values()):
            if time.time() > deadline:
                raise TimeoutError("Airflow did not parse the rebalance DAGs in 420 s")
            time.sleep(3)
        t_parsed = time.time()
        ctx.log(f"[reaction] DAGs parsed {t_parsed - t0:.0f}s after the start; warm-up {P.warm_s:.0f}s")
        # warm-up: the watcher subscribes, both jobs keep the base rate, no signal within its hold
        limit = max(2 * P.base_rate * P.trigger_ms / 1000, 200)
        deadline = time.time() + 600
        while True:
            time.sleep(2)
            for role, j in jobs.items():
                if not j.proc or not j.proc.alive():
                    raise RuntimeError(f"job {role} exited:\n{j.proc.tail() if j.proc else ''}")
            steady = all(len(t := j.epochs_tail(3)) == 3 and all((e.backlog or 0) <= limit for e in t)
                         for j in jobs.values())
            sigs = [s_ for s_ in signal_times(ctx.bootstrap, f"{names['event']}.signals") if s_["t"] >= t_begin]
            quiet = not sigs or time.time() - sigs[-1]["t"] > P.signal_hold_s + 2
            running = [r_ for d in dags.values() for r_ in api.runs(d) if r_.get("state") in ("queued", "running")]
            if time.time() - t_parsed >= P.warm_s and steady and quiet and not running:
                break
            if time.time() > deadline:
                raise TimeoutError(f"no quiet steady state in 600 s (steady={steady}, quiet={quiet}, "
                                   f"runs={len(running)})")
        early = {role: first_emitted(ctx.db_url, job)[0] for role, job in names.items()}
        res["plans_before_step"] = {k: v is not None for k, v in early.items()}
        if any(v is not None for v in early.values()):
            raise RuntimeError(f"a plan was emitted before the step (warm-up not over): {early}")
        res["signals_before_step"] = len(sigs)
        step_gen, sched = _start_gen(ctx, topic, P.keys, f"{P.step_rate - P.base_rate}:{P.timeout_s + 120}",
                                     "reaction-step", words=P.words)
        gens.append(step_gen)
        from bench.loadgen import Schedule

        t_step = Schedule.load(sched).t0
        ctx.log(f"[reaction] step {P.base_rate:.0f} -> {P.step_rate:.0f} rows/s at "
                f"{datetime.fromtimestamp(t_step, UTC).isoformat()}; next tick in "
                f"{next_tick(t_step, P.cron_minutes) - t_step:.0f}s")
        first: dict[str, float | None] = {"event": None, "schedule": None}
        plan_of: dict[str, str | None] = {}
        while time.time() < t_step + P.timeout_s and any(v is None for v in first.values()):
            time.sleep(1)
            for role, job in names.items():
                if first[role] is None:
                    t, pid = first_emitted(ctx.db_url, job)
                    if t is not None:
                        first[role], plan_of[role] = t, pid
                        ctx.log(f"[reaction] {role}: first plan step emitted {t - t_step:.1f}s after the step")
        # context: when each job ran at W=2 (the plan applied), at most `applied_wait_s` after both emitted
        applied: dict[str, float | None] = {}
        wait_end = time.time() + P.applied_wait_s
        while True:
            for role, j in jobs.items():
                w2 = [e for e in j.epochs() if e.workers > 1 and unix(e.ended_at) >= t_step]
                applied[role] = unix(w2[0].ended_at) - t_step if w2 else None
            if all(v is not None for v in applied.values()) or time.time() > wait_end:
                break
            time.sleep(2)
        # context from Airflow: the run that emitted each plan (type, start)
        runs = {role: api.runs(d) for role, d in dags.items()}
        dag_run_s: dict[str, float | None] = {}
        run_rows = []
        for role, rs in runs.items():
            for r_ in rs:
                st_ = _ts(r_.get("start_date"))
                run_rows.append({"job": role, "run_id": r_.get("dag_run_id"), "run_type": r_.get("run_type"),
                                 "state": r_.get("state"), "start_s": st_ - t_step if st_ else None,
                                 "end_s": (_ts(r_.get("end_date")) or t_step) - t_step if r_.get("end_date") else None})
            f = first.get(role)
            starts = [s for s in (_ts(r_.get("start_date")) for r_ in rs) if s is not None and f is not None and s <= f]
            dag_run_s[role] = f - max(starts) if starts and f is not None else None
            emitting = [r_ for r_ in rs if _ts(r_.get("start_date")) == (max(starts) if starts else None)]
            res[f"{role}_run_type"] = emitting[0].get("run_type") if emitting else None
        rp.write_csv(out / "dag_runs.csv", sorted(run_rows, key=lambda x: (x["job"], x["start_s"] or 0)))
        sigs = [s_ for s_ in signal_times(ctx.bootstrap, f"{names['event']}.signals") if s_["t"] >= t_begin]
        rp.write_csv(out / "signals.csv", [{**s_, "t_s": s_["t"] - t_step} for s_ in sigs])
        after = [s_ for s_ in sigs if s_["t"] >= t_step]
        res["signal_after_step_s"] = after[0]["t"] - t_step if after else None
        res["signal_reason"] = after[0]["reason"] if after else None
        res["plans"] = plan_of
        eps = {role: [{"t_s": unix(e.ended_at) - t_step, "epoch": e.epoch, "workers": e.workers,
                       "input_rows": e.input_rows, "backlog": e.backlog, "batch_ms": e.batch_ms}
                      for e in j.epochs() if unix(e.ended_at) >= t_step - 60] for role, j in jobs.items()}
        for role, rows in eps.items():
            rp.write_csv(out / f"epochs_{role}.csv", rows)
        res["summary"] = {**reaction_summary(t_step, first, dag_run_s, P.cron_minutes),
                          "signal_after_step_s": res["signal_after_step_s"], "signal_reason": res["signal_reason"],
                          "base_rate": P.base_rate, "step_rate": P.step_rate, "words": P.words,
                          "signal_epochs": P.signal_epochs, "trigger_ms": P.trigger_ms,
                          "batch_budget_s": P.batch_budget_s,
                          "event_run_type": res.get("event_run_type"),
                          "event_w2_epoch_s": applied.get("event"), "schedule_w2_epoch_s": applied.get("schedule"),
                          # runs that failed before the step (the executor lost the api-server under load)
                          "runs_failed_before_step": sum(1 for r_ in run_rows if r_["state"] == "failed"
                                                         and (r_["start_s"] or 0) < 0),
                          "schedule_run_type": res.get("schedule_run_type")}
        (out / "result.json").write_text(json.dumps(rp.clean(res), indent=2, default=str))
        (out / "README.md").write_text(readme(res["summary"]))
        return res
    finally:
        for g in gens:
            g.stop(timeout=30)
        for j in jobs.values():
            j.stop()
        if airflow_started:
            subprocess.run([sys.executable, str(STACK), "down", "airflow"], env=env, capture_output=True, text=True,
                           timeout=180, cwd=REPO)


def readme(s: dict[str, Any]) -> str:
    if not s:
        return "# Reaction to a load step\n\n(not run)\n"

    def f(x: Any) -> str:
        return f"{x:.1f}" if isinstance(x, int | float) and x == x else "n/a"

    r = s["event_over_schedule"]
    ratio = f"{r:.2f}" if isinstance(r, int | float) and r == r else "n/a"
    return (
        "# Reaction to a load step: event-driven vs schedule\n\n"
        f"Two identical word-count jobs ({s['words']} words per row, trigger {s['trigger_ms']} ms, "
        f"batch budget {s.get('batch_budget_s', 'n/a')} s, W=1, max 2) read "
        f"one topic; their rebalance DAGs run on `{s['cron']}` in the stack's Airflow standalone, one with "
        f"`signal_epochs: 0` (schedule only), one with `signal_epochs: {s['signal_epochs']}` (signals). The input "
        f"steps from {s['base_rate']:.0f} to {s['step_rate']:.0f} rows/s for both at once; reaction = step → first "
        "plan step emitted (plan_steps.emitted_at).\n\n"
        "| | reaction s | DAG run start → emitted s |\n|---|---|---|\n"
        f"| event-driven ({s.get('event_run_type')}) | {f(s['event_s'])} | {f(s['event_dag_run_s'])} |\n"
        f"| schedule ({s.get('schedule_run_type')}) | {f(s['schedule_s'])} | {f(s['schedule_dag_run_s'])} |\n\n"
        f"**event ÷ schedule = {ratio}**. "
        f"The job's signal ({s.get('signal_reason')}) left {f(s.get('signal_after_step_s'))} s after the step. "
        f"First epoch at W=2: event {f(s.get('event_w2_epoch_s'))} s, schedule {f(s.get('schedule_w2_epoch_s'))} s "
        f"after the step. DAG runs that failed before the step: {s.get('runs_failed_before_step', 'n/a')}.\n\n"
        f"One sample: the step fell {f(s['schedule_tick_wait_s'])} s before the next tick. The schedule's reaction "
        f"is that wait + the DAG's run: {f(s['schedule_expected_s'])} s on average over where a step falls "
        f"(half an interval + the measured run), {f(s['schedule_worst_s'])} s at worst.\n\n"
        "Command: `python -m bench.run --smoke --only reaction` (optional: never in the default set).\n")
