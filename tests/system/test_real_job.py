"""The control plane against the real data plane: Airflow DAGs (`dag.test()`) drive a real
key-count Spark job, launched by the supervisor, through the real broker and metrics DB.

One job serves the module (starting Spark costs a minute on two cores); the tests run in file
order and each starts from whatever map the previous one left, reading it from the DB.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaProducer

from ballast import store, supervisor
from ballast.config import load_jobs
from ballast.emitter import ControlEmitter
from ballast.protocol import control_topic
from tests.helpers.jobs import write_jobs_file
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.controlplane, pytest.mark.dataplane, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
BINS = 16

def _load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"real_{name}", REPO / "dags" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def _states(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id.split(".")[-1]: str(ti.state) for ti in dr.get_task_instances()}


def _produce(bootstrap: str, topic: str, n: int, start: int = 0) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20, batch_size=512 * 1024)
    for i in range(start, start + n):
        p.send(topic, key=b"user-%05d" % (i * 7919 % 20000), value=b"1", partition=i % 2)
    p.flush()
    p.close()


def _control_steps(bootstrap: str, job: str) -> list[tuple[str, int]]:
    """Every (plan_id, step) ever written to the job's control topic, in order."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    tp = TopicPartition(control_topic(job), 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    out = [(d["plan_id"], d["step"]) for d in (json.loads(r.value) for r in c)]
    c.close()
    return out


@pytest.fixture(scope="module")
def real_job(tmp_path_factory, kafka_bootstrap, airflow_db):  # type: ignore[no-untyped-def]
    """A key-count job launched detached by the supervisor, as the ballast_supervise DAG does."""
    stack = __import__("sys").modules["ballast_stack"]  # loaded by tests/conftest.py
    from migrations_db.db import migrate

    base = tmp_path_factory.mktemp("realjob")
    job = f"rj{int(time.time()) % 100000}"
    db_url = f"sqlite:///{base / 'metrics.db'}"
    migrate(db_url)
    jobs_file = base / "jobs.yaml"
    write_jobs_file(
        jobs_file, job, BINS, checkpoint_dir=base / "ckpt", heartbeat_timeout_s=120,
        extra_args=["--trigger-ms", "500", "--max-offsets-per-trigger", "4000"],
        rebalance={"window_epochs": 4, "model": "pipelined", "catch_up_s": 5, "target_utilization": 0.15,
                   "utilization_band": 0.05, "await_timeout_s": 240, "poll_interval_s": 0.5},
    )
    mp = pytest.MonkeyPatch()
    mp.setenv("BALLAST_JOBS_FILE", str(jobs_file))
    mp.setenv("BALLAST_DB_URL", db_url)
    mp.setenv("BALLAST_KAFKA_BOOTSTRAP", kafka_bootstrap)
    mp.setenv("BALLAST_STATE_DIR", str(base / "state"))
    stack.ensure_topics({f"{job}.in": 2}, kafka_bootstrap)
    cfg = load_jobs()[job]
    pid = supervisor.launch(cfg, kafka_bootstrap, db_url, reason="test")
    try:
        wait_until(lambda: store.latest_map(db_url, job, "keycount") is not None, 240, "the job's first routing map")
        yield {"job": job, "db_url": db_url, "cfg": cfg, "bootstrap": kafka_bootstrap, "pid": pid}
    finally:
        supervisor.stop(cfg, timeout_s=60)
        mp.undo()


def test_scheduled_rebalance_scales_real_job_1_to_2(real_job):
    job, url, bootstrap = real_job["job"], real_job["db_url"], real_job["bootstrap"]
    # a burst far larger than what one worker drains within catch_up_s (5 s) at the 0.15 target
    # utilization: DS2's target rate = source rate + backlog / catch_up_s asks for more workers
    # (clamped to max_workers=2); the job takes at most 4000 rows per epoch, so the backlog lasts
    _produce(bootstrap, f"{job}.in", 400_000)
    wait_until(lambda: len([e for e in store.epoch_window(url, job, "keycount", 10)
                       if e.input_rows and (e.backlog or 0) > 100_000]) >= 4,
          300, "four epochs with a large backlog")
    dag = _load("ballast_rebalance").make_dag(load_jobs()[job], None)  # the job's own DAG
    dr = dag.test()
    assert set(_states(dr).values()) == {"success"}, _states(dr)
    plan_done_epoch = max(e.epoch for e in store.epoch_window(url, job, "keycount", 1))

    def epochs_after():  # type: ignore[no-untyped-def]
        es = [e for e in store.epoch_window(url, job, "keycount", 50) if e.epoch > plan_done_epoch and e.input_rows]
        return es[:4] if len(es) >= 4 else None

    after = wait_until(epochs_after, 240, "four loaded epochs after the migration")

    d = store.latest_decision(url, job, "keycount")
    assert d.action == "scale_up" and d.current_workers == 1 and d.target_workers == 2, d.reason
    plan = store.recent_plans(url, job=job)[0]
    assert plan.status == "completed" and plan.strategy == "batched" and plan.target_workers == 2
    cps = store.checkpoints(url, plan.plan_id)
    assert sorted(cps) == list(range(1, plan.steps + 1))
    assert {c.status for c in cps.values()} == {"applied"}
    cur = store.latest_map(url, job, "keycount")
    assert cur.workers == 2 and list(cur.assignment) == list(plan.target_assignment)
    assert set(cur.assignment) == {0, 1}
    # batched with one sender and one receiver: one bin per step (Megaphone's matching)
    assert all(len(s.payload["moves"]) == 1 for s in store.plan_steps(url, plan.plan_id))

    # the backlog stops growing: on 2 workers it only drains
    backlogs = [e.backlog or 0 for e in after]
    assert all(e.workers == 2 for e in after)
    assert backlogs == sorted(backlogs, reverse=True), f"backlog grew after scaling: {backlogs}"
    # and the new worker really applies records (metrics recorded per worker by the job)
    workers_seen = {w.worker for w in store.worker_window(url, job, "keycount", [e.epoch for e in after])
                    if w.records_in > 0}
    assert workers_seen == {0, 1}


def test_manual_run_moves_chosen_bins_on_real_job(real_job):
    job, url, bootstrap = real_job["job"], real_job["db_url"], real_job["bootstrap"]
    before = store.latest_map(url, job, "keycount")
    on_w1 = [b for b, w in enumerate(before.assignment) if w == 1][:2]
    on_w0 = [b for b, w in enumerate(before.assignment) if w == 0][:1]
    moves = [{"bin": b, "to": 0} for b in on_w1] + [{"bin": b, "to": 1} for b in on_w0]
    _produce(bootstrap, f"{job}.in", 5000, start=300_000)  # keep epochs coming
    dag = _load("ballast_migrate").make_dag(load_jobs())
    # the approval is marked given (test_migrate_approval.py answers it through the REST API)
    dr = dag.test(run_conf={"job": job, "moves": moves, "strategy": "fluid", "dry_run": False},
                  mark_success_pattern="approve")
    assert set(_states(dr).values()) == {"success"}, _states(dr)
    after = store.latest_map(url, job, "keycount")
    for m in moves:
        assert after.assignment[m["bin"]] == m["to"]
    untouched = set(range(BINS)) - {m["bin"] for m in moves}
    assert all(after.assignment[b] == before.assignment[b] for b in untouched)
    plan = store.recent_plans(url, job=job)[0]
    assert plan.steps == len(moves) and after.map_version == before.map_version + len(moves)


def test_interrupted_plan_resumes_without_re_emitting_on_real_job(real_job):
    from ballast import controller

    job, url, bootstrap, cfg = real_job["job"], real_job["db_url"], real_job["bootstrap"], real_job["cfg"]
    cur = store.latest_map(url, job, "keycount")
    moves = [{"bin": b, "to": 1 - w} for b, w in list(enumerate(cur.assignment))[:4]]
    plan_id = controller.plan_manual(url, cfg, {"job": job, "moves": moves, "strategy": "fluid",
                                               "dry_run": False, "reason": "resume test"})["plan_id"]
    n, k = len(store.plan_steps(url, plan_id)), 2
    _produce(bootstrap, f"{job}.in", 5000, start=400_000)
    with ControlEmitter(bootstrap, url) as em:  # the first attempt dies after step k
        for i in range(1, k + 1):
            assert [e.step for e in em.emit(plan_id).emitted] == [i]
            wait_until(lambda: i in store.checkpoints(url, plan_id), 120, f"checkpoint of step {i}")
    # a new process picks the plan up from the DB alone (as a retried Airflow task would)
    code = (
        "import sys,time\n"
        "from ballast.emitter import ControlEmitter\nfrom ballast import store\n"
        f"url, plan = {url!r}, {plan_id!r}\nsent = []\n"
        f"with ControlEmitter({bootstrap!r}, url) as em:\n"
        "    while True:\n"
        "        out = em.emit(plan)\n        sent += [e.step for e in out.emitted]\n"
        "        if not out.waiting_for: break\n"
        "        t = time.time() + 120\n"
        "        while out.waiting_for[0] not in store.checkpoints(url, plan) and time.time() < t: time.sleep(0.5)\n"
        "print(sent)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().splitlines()[-1] == str(list(range(k + 1, n + 1)))
    wait_until(lambda: len(store.checkpoints(url, plan_id)) == n, 120, "all checkpoints")
    controller.verify(url, plan_id)
    emitted = Counter(_control_steps(bootstrap, job))
    assert all(emitted[(plan_id, s)] == 1 for s in range(1, n + 1)), emitted
    assert sum(1 for (p, _s) in emitted if p == plan_id) == n


def test_stop_is_graceful_and_leaves_nothing(real_job):
    """Last in this module: the supervisor's stop ends the job with one SIGTERM to the Python
    driver — it finishes its epoch and exits, spark-submit and the launcher with it; no process of
    the group is left and the driver log has no py4j retries against a dead JVM."""
    cfg, pid = real_job["cfg"], real_job["pid"]
    started = time.monotonic()
    assert supervisor.stop(cfg, timeout_s=60) == "SIGTERM"
    took = time.monotonic() - started
    assert not supervisor.group_members(pid), "a process of the driver's group outlived the stop"
    log_text = (cfg.state_dir() / "driver.log").read_text(errors="replace")
    assert "ConnectionRefusedError" not in log_text, log_text[-3000:]
    print(f"stopped by SIGTERM in {took:.1f}s")
