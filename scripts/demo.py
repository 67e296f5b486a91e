"""`make demo`: the main job end to end on the embedded defaults, driven through Airflow.

1. Kafka and Airflow standalone are up (`make up` ran first); the input topic exists. Secure by
   default: the broker runs SASL/SCRAM + ACLs (the demo's load and topic set-up use `admin`) and
   every control step is signed with the key `make up` made (docs/operations.md, "Secure by
   default"); BALLAST_KAFKA_AUTH=none / BALLAST_CONTROL_SIGNING=none opt out.
2. Airflow's `ballast_supervise` DAG launches the key-count job `clicks` (1 worker) and the demo
   waits for its heartbeat in the metrics DB.
3. An open-loop load generator feeds `clicks` with a Zipf-skewed key stream.
4. The scheduled rebalance is paused for the manual plan (one plan per job at a time; resumed
   afterwards, also on failure); a plan it already opened finishes first, and a plan left open
   by a run that is gone (an interrupted earlier demo) is failed, as `python -m ballast.control
   fail` would.
   `ballast_migrate` is triggered through Airflow's REST API — exactly as from the UI form — to
   scale the job to 2 workers with the batched strategy; the demo prints the plan the approval
   request shows and approves it (REST `hitlDetails`, as a person would in the UI); the job
   migrates bins live.
5. The demo prints every step's step checkpoint and the final routing map, waits out DS2's
   warm-up after that change, and asks the rebalance DAG for DS2's decision under load (a
   scale-up runs as a plan of its own); then it lowers the load and asks again, so the demo ends
   on a real DS2 decision with its numbers (a proposed scale-down, held or not by the guards),
   and prints the console URL.

Everything stays up afterwards for exploring the UI (`make down` stops it, the job included).
Re-running is safe. The DAG ids are resolved at run time: one supervise/rebalance DAG per job
(`ballast_<kind>__clicks`) or the shared `ballast_<kind>`.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import stack  # noqa: E402

from ballast import dag_ids  # noqa: E402
from ballast.kafka_security import KafkaSecurity  # noqa: E402
from ballast.options import settings  # noqa: E402
from ballast.store import JobStore  # noqa: E402
from ballast.store.schema import default_url  # noqa: E402

JOB, OPERATOR = "clicks", "keycount"
API = f"http://{stack.HOST}:{stack.AIRFLOW_PORT}"
CONSOLE = f"{API}/ballast/?job={JOB}&operator={OPERATOR}"  # the plugin's FastAPI app (plugins/ballast/plugin.py)


def say(msg: str) -> None:
    print(f"[ballast-demo] {msg}", flush=True)


class Airflow:
    """The few REST calls the demo needs (what the UI does when a person clicks Trigger)."""

    def __init__(self) -> None:
        body = json.dumps({"username": stack.ADMIN_USER, "password": stack.ADMIN_PASSWORD}).encode()
        req = urllib.request.Request(f"{API}/auth/token", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            self.token = json.load(r)["access_token"]

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        req = urllib.request.Request(
            f"{API}/api/v2{path}", json.dumps(body).encode() if body is not None else None,
            {"Content-Type": "application/json", "Authorization": f"Bearer {self.token}"}, method=method,
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.load(r)

    def wait_for_dag(self, *candidates: str, timeout_s: float = 240) -> str:
        """The first of `candidates` Airflow has parsed (unpaused); waits for the DAG processor."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for dag_id in candidates:
                try:
                    dag = self.call("GET", f"/dags/{dag_id}")
                except urllib.error.HTTPError as exc:
                    if exc.code != 404:
                        raise
                    continue
                if dag.get("is_paused"):
                    self.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})
                return dag_id
            time.sleep(3)
        raise SystemExit(f"Airflow has not parsed {' or '.join(candidates)} after {timeout_s:.0f}s: "
                         "see .state/logs/airflow.log")

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        say(f"triggered {dag_id} run {run['dag_run_id']} conf={json.dumps(conf)}")
        return run["dag_run_id"]

    def approve_pending(self, dag_id: str, run_id: str) -> bool:
        """Answer the run's human-in-the-loop request (ballast_migrate's `approve` task) with
        Approve, as a person would under "Required Actions"; print what they would read first."""
        run = urllib.parse.quote(run_id, safe="")
        try:
            pending = [d for d in self.call("GET", f"/dags/{dag_id}/dagRuns/{run}/hitlDetails")["hitl_details"]
                       if not d["response_received"]]
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # no approval step in this DAG (or not reached yet)
                return False
            raise
        for d in pending:
            ti = d["task_instance"]
            # answer only once the task waits for it: a response that lands while the operator is
            # still deferring itself (within ~0.5 s, faster than any person) fails the task
            state = self.call("GET", f"/dags/{dag_id}/dagRuns/{run}/taskInstances/{ti['task_id']}")["state"]
            if state not in ("deferred", "awaiting_input"):
                return False
            say(f"  approval requested: {d['subject']}")
            for line in d["body"].splitlines():
                if line.strip() and not line.startswith("```"):
                    say(f"    {line}")
            self.call("PATCH", f"/dags/{dag_id}/dagRuns/{run}/taskInstances/{ti['task_id']}/-1/hitlDetails",
                      {"chosen_options": ["Approve"]})
            say("  approved (the demo plays the person in Required Actions)")
        return bool(pending)

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float, approve: bool = False) -> str:
        deadline, last = time.time() + timeout_s, ""
        while time.time() < deadline:
            state = self.call("GET", f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id, safe='')}")["state"]
            if state != last:
                say(f"  {dag_id}: {state}")
                last = state
            if state in ("success", "failed"):
                return state
            if approve and self.approve_pending(dag_id, run_id):
                approve = False
            time.sleep(3)
        raise SystemExit(f"{dag_id} run {run_id} did not finish within {timeout_s:.0f}s; see the Airflow UI")


def job_store() -> JobStore:
    """The metrics store bound to the demo's job (the DB the stack's jobs file names)."""
    return JobStore(default_url(), JOB, OPERATOR)


class Load:
    """Open-loop load generator: records are sent on a fixed schedule, whatever the job's speed.

    The rate can be changed while it runs (the demo lowers it to show DS2 proposing fewer workers)."""

    def __init__(self, rate: float, keys: int) -> None:
        self.rate, self.keys, self.sent = rate, keys, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def set_rate(self, rate: float) -> None:
        say(f"load generator: {self.rate:.0f} -> {rate:.0f} records/s")
        self.rate = rate

    def _run(self) -> None:
        from kafka import KafkaProducer

        rng = random.Random(7)
        weights = [1.0 / (i + 1) ** 1.1 for i in range(self.keys)]
        population = list(range(self.keys))
        producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap(), acks=1, linger_ms=20,
                                 **stack.default_broker().client_kwargs("admin"))
        last, owed = time.time(), 0.0
        while not self.stop.is_set():
            now = time.time()
            owed += (now - last) * self.rate
            last = now
            n = int(owed)
            for k in rng.choices(population, weights, k=n):
                producer.send(JOB, key=f"key-{k}".encode(), value=b"1")
            owed -= n
            self.sent += n
            time.sleep(0.05)
        producer.flush()
        producer.close()

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        say(f"load generator sent {self.sent} records")


def show_plan(plan_id: str | None = None) -> str | None:
    """Print a plan's steps (the newest plan of the job by default); returns its status."""
    store = job_store()
    plan = store.get_plan(plan_id) if plan_id else store.latest_plan()
    if plan is None:
        return None
    cps = store.checkpoints(plan.plan_id)
    say(f"plan {plan.plan_id} ({plan.strategy}, {plan.steps} steps, {plan.source_workers} -> "
        f"{plan.target_workers} workers): {plan.status}")
    say(f"  {'step':>4} {'status':9} {'epoch':>6} {'bins':>4} {'keys':>8} {'bytes':>10} {'ms':>8}")
    for _, c in sorted(cps.items()):
        say(f"  {c.step:>4} {c.status:9} {c.applied_epoch!s:>6} {c.bins_moved:>4} {c.keys_moved:>8} "
            f"{c.bytes_moved:>10} {c.migration_ms:>8.1f}")
    return plan.status


def _num(inputs: dict[str, Any], key: str, fmt: str) -> str:
    value = inputs.get(key)
    return format(value, fmt) if isinstance(value, (int, float)) else "n/a"


def show_decision(d: Any) -> None:
    """DS2's decision as a person reads it: the proposal, what the guards made of it, the numbers."""
    i = d.inputs
    verdict = {"scale_up": "SCALE UP", "scale_down": "SCALE DOWN", "rebalance": "REBALANCE",
               "no_change": "NO CHANGE"}.get(d.action, d.action)
    say(f"DS2 decision #{d.id} at {d.decided_at:%H:%M:%S}Z: {verdict} — {d.current_workers} worker(s) now, "
        f"DS2 proposes {d.proposed_workers}, target {d.target_workers}")
    say(f"  source rate {_num(i, 'ds2.source_rate', ',.0f')} rec/s, backlog {_num(i, 'ds2.backlog', ',.0f')}, "
        f"true rate per worker {_num(i, f'ds2.{OPERATOR}.true_rate_per_instance', ',.0f')} rec/s, "
        f"utilization {_num(i, 'utilization', '.2f')} (target {_num(i, 'target_utilization', '.2f')} "
        f"± {_num(i, 'utilization_band', '.2f')})")
    say(f"  reason: {d.reason}")


def ask_ds2(af: Airflow, dag_id: str, why: str) -> Any:
    """Trigger the rebalance DAG and return the decision its run stored (a scale-up or -down runs
    its plan inside the same run; that plan is printed too)."""
    from ballast.store import decisions_since

    say(f"asking DS2 ({dag_id}) {why}")
    since = datetime.now(UTC)
    state = af.wait_run(dag_id, af.trigger(dag_id, {}), 900)
    found = decisions_since(default_url(), JOB, OPERATOR, since)
    if not found:
        raise SystemExit(f"{dag_id} ran ({state}) but stored no decision for {JOB}: see its task log in the UI")
    d = found[-1]
    show_decision(d)
    if d.plan_id:
        show_plan(d.plan_id)
    return d


def wait_out_warmup(after: datetime) -> None:
    """DS2's guards ignore decisions for `warmup_s` after a change (and `warmup_epochs` epochs)."""
    from ballast.config import get_job

    rb = get_job(JOB).rebalance
    left = rb.warmup_s + 5 - (datetime.now(UTC) - after).total_seconds()
    if left > 0:
        say(f"waiting {left:.0f}s: DS2 ignores decisions for {rb.warmup_s:.0f}s (and {rb.warmup_epochs} epochs) "
            "after a change, so the job's new speed is measured, not its restart")
        time.sleep(left)


def settle_open_plans(timeout_s: float = 600) -> None:
    """Before the demo's own plan: wait for an open plan whose run is alive (a scheduled rebalance
    that started with Airflow) to finish; fail one whose run is gone (an earlier, interrupted demo),
    as `python -m ballast.control fail` would. Only one plan per operator may be open."""
    from ballast.controller import fail_plan

    deadline, shown = time.time() + timeout_s, ""
    while plans := job_store().open_plans():
        p = plans[0]
        if not p.owner_alive() and p.status != "awaiting_approval":
            say(f"plan {p.plan_id} ({p.status}) is left open by a run that is gone: failing it "
                "(nothing more of it is sent; the job keeps its current map)")
            fail_plan(default_url(), p.plan_id, f"plan {p.plan_id}: left open by a gone run, failed by make demo",
                      "plan_failed_by_hand")
            continue
        if p.plan_id != shown:
            say(f"waiting for plan {p.plan_id} ({p.status}, {p.source_workers} -> {p.target_workers} workers, "
                f"owner {p.owner or '?'}) to finish first")
            shown = p.plan_id
        if time.time() > deadline:
            raise SystemExit(f"plan {p.plan_id} is still {p.status} after {timeout_s:.0f} s: see the console "
                             f"({CONSOLE}), or fail it with `python -m ballast.control fail {p.plan_id}`")
        time.sleep(3)
    if shown:
        show_plan(shown)


def latest_epoch() -> int:
    return job_store().latest_epoch() or 0


def wait_for_window(timeout_s: float = 180) -> None:
    """Until DS2's whole window (`window_epochs`) holds epochs run after now (plus one in flight),
    so the next decision sees only the lower load, not a mix."""
    from ballast.config import get_job

    window = get_job(JOB).rebalance.window_epochs
    until = latest_epoch() + window + 2
    say(f"waiting for {window} epochs at the lower load (DS2's window)")
    deadline = time.time() + timeout_s
    while latest_epoch() < until:
        if time.time() > deadline:
            say(f"fewer than {window} epochs in {timeout_s:.0f}s: DS2 decides on a mixed window")
            return
        time.sleep(2)


def main() -> int:
    os.environ.setdefault("BALLAST_DB_URL", default_url())
    broker = stack.default_broker()
    say(f"Kafka: {broker.bootstrap}, " + ("SASL/SCRAM + ACLs (principals admin, controller, job)"
                                          if broker.auth == "scram"
                                          else "PLAINTEXT, no authentication (BALLAST_KAFKA_AUTH=none)"))
    say("control messages: " + (f"signed, key id {stack.ensure_signing_key(stack.STATE)['kid']}"
                                 if stack.signing_enabled() else "UNSIGNED (BALLAST_CONTROL_SIGNING=none)"))
    stack.ensure_topics({JOB: 4}, security=KafkaSecurity.from_config(broker.client_config("admin")))
    af = Airflow()
    supervise = af.wait_for_dag(dag_ids.supervise(JOB), "ballast_supervise")
    migrate = af.wait_for_dag(dag_ids.MIGRATE)
    rebalance = af.wait_for_dag(dag_ids.rebalance(JOB), "ballast_rebalance")

    rate = settings().demo_rate
    # the load starts first: an idle job runs no epochs, and epochs are what write its heartbeat
    with Load(rate, 50_000) as gen:
        hb = job_store().heartbeat()
        if hb is None or hb.status != "running" or time.time() - hb.updated_at.timestamp() > 60:
            say(f"launching the key-count job through {supervise}")
            af.wait_run(supervise, af.trigger(supervise, {}), 300)
            deadline = time.time() + 300
            while (hb := job_store().heartbeat()) is None or time.time() - hb.updated_at.timestamp() > 30:
                if time.time() > deadline:
                    raise SystemExit(f"the job wrote no heartbeat in 5 min: see .state/jobs/{JOB}/driver.log")
                time.sleep(3)
        say(f"job {JOB} is running: epoch {hb.last_epoch}, {hb.workers} worker(s), map version {hb.map_version}")
        time.sleep(20)  # a few epochs of metrics under load
        # one plan at a time per job: hold the scheduled rebalance while the manual plan runs, and
        # let a plan it already opened (Airflow runs the latest interval when it starts) finish
        af.call("PATCH", f"/dags/{rebalance}", {"is_paused": True})
        try:
            settle_open_plans()
            before = job_store().latest_map()
            target = before.workers + 1 if before.workers < 4 else 1
            say(f"map version {before.map_version}: {before.workers} worker(s); migrating live to {target}")
            state = af.wait_run(migrate, af.trigger(migrate, {"job": JOB, "target_workers": target,
                                                              "strategy": "batched", "dry_run": False,
                                                              "reason": "make demo"}), 900, approve=True)
        finally:  # the schedule resumes whatever happened
            af.call("PATCH", f"/dags/{rebalance}", {"is_paused": False})
        show_plan()
        after = job_store().latest_map()
        say(f"final map version {after.map_version}: {after.workers} workers, bins per worker "
            f"{[after.assignment.count(w) for w in range(after.workers)]}")
        if state != "success":
            say(f"the migration run failed: open the Airflow UI ({migrate}) for the task log")
            return 1
        wait_out_warmup(datetime.now(UTC))
        under_load = ask_ds2(af, rebalance, f"about the job under {rate:.0f} records/s")
        if under_load.plan_id:  # it rescaled: its own warm-up starts now
            wait_out_warmup(datetime.now(UTC))
        gen.set_rate(rate / 20)
        wait_for_window()
        final = ask_ds2(af, rebalance, f"again, the load now {rate / 20:.0f} records/s")
    if final.proposed_workers < final.current_workers:
        say(f"DS2 proposes scaling down {final.current_workers} -> {final.proposed_workers} at the lower load"
            + ("" if final.target_workers < final.current_workers else
               " (held by the guards above; the scheduled rebalance acts once the delay has passed)"))
    say(f"console: {CONSOLE}")
    say(f"done. Airflow UI: {API} (login {stack.ADMIN_USER} / {stack.ADMIN_PASSWORD}); "
        "`make down` stops everything, the job included")
    return 0


if __name__ == "__main__":
    sys.exit(main())
