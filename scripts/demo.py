"""`make demo`: the main job end to end on the embedded defaults, driven through Airflow.

1. Kafka and Airflow standalone are up (`make up` ran first); the input topic exists.
2. Airflow's `ballast_supervise` DAG launches the key-count job `clicks` (1 worker) and the demo
   waits for its heartbeat in the metrics DB.
3. An open-loop load generator feeds `clicks` with a Zipf-skewed key stream.
4. `ballast_migrate` is triggered through Airflow's REST API — exactly as from the UI form — to
   scale the job to 2 workers with the batched strategy; the job migrates bins live.
5. The demo prints every step's completion checkpoint, the final routing map, and the scheduled
   `ballast_rebalance` DAG's DS2 decision on the running job.

Everything stays up afterwards for exploring the UI (`make down` stops it). Re-running is safe.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
import stack  # noqa: E402

from migrations_db.db import default_url, session_scope  # noqa: E402

JOB = "clicks"
API = f"http://{stack.HOST}:{stack.AIRFLOW_PORT}"


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

    def wait_for_dag(self, dag_id: str, timeout_s: float = 240) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                dag = self.call("GET", f"/dags/{dag_id}")
                if dag.get("is_paused"):
                    self.call("PATCH", f"/dags/{dag_id}", {"is_paused": False})
                return
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
            time.sleep(3)
        raise SystemExit(f"Airflow has not parsed {dag_id} after {timeout_s:.0f}s: see .state/logs/airflow.log")

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        run = self.call("POST", f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        say(f"triggered {dag_id} run {run['dag_run_id']} conf={json.dumps(conf)}")
        return run["dag_run_id"]

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        deadline, last = time.time() + timeout_s, ""
        while time.time() < deadline:
            state = self.call("GET", f"/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state != last:
                say(f"  {dag_id}: {state}")
                last = state
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise SystemExit(f"{dag_id} run {run_id} did not finish within {timeout_s:.0f}s; see the Airflow UI")


def heartbeat() -> Any:
    from migrations_db.models import Heartbeat

    with session_scope() as s:
        return s.get(Heartbeat, (JOB, "keycount"))


def current_map() -> Any:
    from sqlalchemy import select

    from migrations_db.models import RoutingMap

    with session_scope() as s:
        return s.scalars(select(RoutingMap).where(RoutingMap.job == JOB)
                         .order_by(RoutingMap.map_version.desc()).limit(1)).first()


def load(stop: threading.Event, rate: float, keys: int) -> None:
    """Open loop: records are sent on a fixed schedule, whatever the job's speed."""
    from kafka import KafkaProducer

    rng = random.Random(7)
    weights = [1.0 / (i + 1) ** 1.1 for i in range(keys)]
    population = list(range(keys))
    producer = KafkaProducer(bootstrap_servers=stack.kafka_bootstrap(), acks=1, linger_ms=20)
    start, sent = time.time(), 0
    while not stop.is_set():
        due = int((time.time() - start) * rate)
        for k in rng.choices(population, weights, k=max(0, due - sent)):
            producer.send(JOB, key=f"key-{k}".encode(), value=b"1")
        sent = max(sent, due)
        time.sleep(0.05)
    producer.flush()
    producer.close()
    say(f"load generator sent {sent} records")


def main() -> int:
    os.environ.setdefault("BALLAST_DB_URL", default_url())
    stack.ensure_topics({JOB: 4})
    af = Airflow()
    for dag_id in ("ballast_supervise", "ballast_migrate", "ballast_rebalance"):
        af.wait_for_dag(dag_id)

    hb = heartbeat()
    if hb is None or hb.status != "running" or time.time() - hb.updated_at.timestamp() > 60:
        say("launching the key-count job through ballast_supervise")
        af.wait_run("ballast_supervise", af.trigger("ballast_supervise", {}), 300)
        deadline = time.time() + 300
        while (hb := heartbeat()) is None or time.time() - hb.updated_at.timestamp() > 30:
            if time.time() > deadline:
                raise SystemExit("the job wrote no heartbeat in 5 min: see .state/jobs/clicks/driver.log")
            time.sleep(3)
    say(f"job {JOB} is running: epoch {hb.last_epoch}, {hb.workers} worker(s), map version {hb.map_version}")

    stop = threading.Event()
    gen = threading.Thread(target=load, args=(stop, float(os.environ.get("BALLAST_DEMO_RATE", "20000")), 50_000))
    gen.start()
    try:
        time.sleep(20)  # a few epochs of metrics under load
        before = current_map()
        target = before.workers + 1 if before.workers < 4 else 1
        say(f"map version {before.map_version}: {before.workers} worker(s); migrating live to {target}")
        # one plan at a time per job: hold the scheduled rebalance while the manual plan runs
        af.call("PATCH", "/dags/ballast_rebalance", {"is_paused": True})
        run = af.trigger("ballast_migrate", {"job": JOB, "target_workers": target, "strategy": "batched",
                                             "dry_run": False, "reason": "make demo"})
        state = af.wait_run("ballast_migrate", run, 900)
        after = current_map()
        with session_scope() as s:
            from sqlalchemy import select

            from migrations_db.models import Checkpoint, Plan

            plan = s.scalars(select(Plan).where(Plan.job == JOB).order_by(Plan.created_at.desc())).first()
            cps = s.scalars(select(Checkpoint).where(Checkpoint.plan_id == plan.plan_id)
                            .order_by(Checkpoint.step)).all()
            say(f"plan {plan.plan_id} ({plan.strategy}, {plan.steps} steps): {plan.status}")
            say(f"  {'step':>4} {'status':9} {'epoch':>6} {'bins':>4} {'keys':>8} {'bytes':>10} {'ms':>8}")
            for c in cps:
                say(f"  {c.step:>4} {c.status:9} {c.applied_epoch!s:>6} {c.bins_moved:>4} {c.keys_moved:>8} "
                    f"{c.bytes_moved:>10} {c.migration_ms:>8.1f}")
        say(f"final map version {after.map_version}: {after.workers} workers, bins per worker "
            f"{[after.assignment.count(w) for w in range(after.workers)]}")
        if state != "success":
            say("the migration run failed: open the Airflow UI (ballast_migrate) for the task log")
            return 1
        af.call("PATCH", "/dags/ballast_rebalance", {"is_paused": False})
        say("asking DS2 (ballast_rebalance) what it makes of the running job")
        af.wait_run("ballast_rebalance", af.trigger("ballast_rebalance", {}), 900)
        with session_scope() as s:
            from sqlalchemy import select

            from migrations_db.models import Decision

            d = s.scalars(select(Decision).where(Decision.job == JOB).order_by(Decision.id.desc())).first()
            if d:
                say(f"DS2 decision: {d.action} ({d.current_workers} -> {d.target_workers}): {d.reason}")
    finally:
        stop.set()
        gen.join()
    say(f"done. Airflow UI: {API} (login {stack.ADMIN_USER} / {stack.ADMIN_PASSWORD}); `make down` stops everything")
    return 0


if __name__ == "__main__":
    sys.exit(main())
