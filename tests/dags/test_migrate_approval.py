"""ballast_migrate's approval, answered by a person through Airflow's REST API.

The DAG runs under `dag.test()`; a real `airflow api-server` on the same metadata DB serves the
`hitlDetails` endpoints. A test logs in (POST /auth/token), waits for the approval request, reads
the rendered plan in its body, and answers: Approve — exactly the stored plan is emitted to the
real broker (the reference step applier answers) and verified; Reject — the plan is cancelled
and nothing reaches the control topic.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from ballast import store
from ballast.config import load_jobs
from test_dags_run import _load
from test_dags_run import env as seeded_job  # noqa: F401  (registers fixture `env`: the seeded job)
from tests.helpers.procs import free_port, stop_group
from tests.helpers.stepapplier import StepApplier

pytestmark = [pytest.mark.controlplane, pytest.mark.slow]  # timeout by thread: tests/dags/conftest.py
USER, PASSWORD = "approver", "approver-pw"


class Api:
    """A logged-in client of the real api-server's REST API."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.token = ""

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self.token}"} if self.token else {})})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    def login(self) -> None:
        code, body = self.call("POST", "/auth/token", {"username": USER, "password": PASSWORD})
        assert code in (200, 201), f"login failed: {code} {body}"
        self.token = body["access_token"]


@pytest.fixture(scope="module")
def api(airflow_db: Path) -> Iterator[Api]:
    """`airflow api-server` on a free port, sharing the tests' throwaway AIRFLOW_HOME and metadata DB."""
    port = free_port()
    (airflow_db / "simple_auth_manager_passwords.json.generated").write_text(json.dumps({USER: PASSWORD}))
    env = {**os.environ, "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
           "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False"}
    log = airflow_db / "api-server.log"
    airflow = str(Path(sys.executable).parent / "airflow")
    with open(log, "ab") as out:
        proc = subprocess.Popen([airflow, "api-server", "--host", "127.0.0.1", "--port", str(port)], env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    client = Api(f"http://127.0.0.1:{port}")
    try:
        end = time.monotonic() + 240
        while time.monotonic() < end:
            assert proc.poll() is None, f"api-server exited:\n{log.read_text()[-3000:]}"
            try:
                if client.call("GET", "/api/v2/version")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            pytest.fail(f"api-server not up within 240 s:\n{log.read_text()[-3000:]}")
        client.login()
        yield client
    finally:
        stop_group(proc)


def _migrate_dag():  # type: ignore[no-untyped-def]
    return _load("ballast_migrate").make_dag(load_jobs())


class Approver(threading.Thread):
    """A person: waits for the run's approval request, reads it, answers `choice`."""

    def __init__(self, api: Api, job: str, choice: str, db_url: str) -> None:
        super().__init__(daemon=True)
        self.api, self.job, self.choice, self.db_url = api, job, choice, db_url
        self.request: dict[str, Any] | None = None
        self.plan_status_seen = ""
        self.answer: tuple[int, Any] | None = None
        self.error = ""

    def run(self) -> None:
        try:
            end = time.monotonic() + 180
            while time.monotonic() < end and self.request is None:
                code, body = self.api.call("GET", "/api/v2/dags/ballast_migrate/dagRuns/~/hitlDetails")
                for d in (body or {}).get("hitl_details", []) if code == 200 else []:
                    # a person answers what the UI lists as waiting: the task parked. Its request row is
                    # written before the task parks, and an answer in between is recorded but resumes
                    # nothing (the API resumes parked tasks only; under dag.test no triggerer polls for
                    # it): a CI run hung 48 min in dag.test with the answer stored
                    parked = d["task_instance"]["state"] in ("awaiting_input", "deferred")
                    if not d["response_received"] and self.job in d["body"] and parked:
                        self.request = d
                time.sleep(0.5)
            if self.request is None:
                self.error = "no approval request appeared"
                return
            plans = store.recent_plans(self.db_url, job=self.job)
            self.plan_status_seen = plans[0].status if plans else "none"
            ti = self.request["task_instance"]
            path = (f"/api/v2/dags/ballast_migrate/dagRuns/{quote(ti['dag_run_id'], safe='')}"
                    f"/taskInstances/{ti['task_id']}/-1/hitlDetails")
            self.answer = self.api.call("PATCH", path, {"chosen_options": [self.choice]})
        except Exception as exc:  # reported by the test
            self.error = repr(exc)


def _states(dr) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def _run_with(api: Api, job: str, db_url: str, choice: str, conf: dict[str, Any],
              applier: StepApplier) -> tuple[Any, Approver]:
    person = Approver(api, job, choice, db_url)
    person.start()
    applier.start()
    try:
        dr = _migrate_dag().test(run_conf={"job": job, "dry_run": False, **conf})
    finally:
        applier.stop()
        person.join(timeout=30)
    assert not person.error, person.error
    return dr, person


def test_approved_plan_is_emitted_exactly_as_shown(api, seeded_job, db_url, kafka_bootstrap):  # noqa: F811 (fixture)
    env = seeded_job
    applier = StepApplier(kafka_bootstrap, db_url, env)
    dr, person = _run_with(api, env, db_url, "Approve",
                           {"moves": [{"bin": 3, "to": 1}, {"bin": 12, "to": 1}], "strategy": "fluid"}, applier)
    assert person.answer is not None and person.answer[0] == 200, person.answer
    states = _states(dr)
    assert states["approve"] == "success" and states["cancel_unapproved"] == "success", states
    assert all(v == "success" for v in states.values()), states
    req = person.request
    assert req is not None and req["options"] == ["Approve", "Reject"] and req["defaults"] == ["Reject"]
    plan = store.recent_plans(db_url, job=env)[0]
    # the person saw the stored plan: its id, steps, moves and predicted duration, before any send
    assert plan.plan_id in req["subject"] and plan.plan_id in req["body"]
    assert "predicted duration" in req["body"] and "3:0->1" in req["body"] and "12:0->1" in req["body"]
    assert "Deadline once approved" in req["body"]
    assert person.plan_status_seen == "awaiting_approval"
    # exactly that plan went out, and was verified
    assert plan.status == "completed"
    assert {p for p, _, _ in applier.seen} == {plan.plan_id}
    assert [s for _, s, _ in applier.seen] == [1, 2]
    cur = store.latest_map(db_url, env, "keycount")
    assert cur.workers == 2 and cur.assignment[3] == 1 and cur.assignment[12] == 1
    approved = store.events(db_url, env, kind="plan_approved")
    assert approved and f"approved by {USER}" in approved[0].message


def test_rejected_plan_is_cancelled_and_nothing_is_sent(api, seeded_job, db_url, kafka_bootstrap):  # noqa: F811 (fixture)
    env = seeded_job
    applier = StepApplier(kafka_bootstrap, db_url, env)
    dr, person = _run_with(api, env, db_url, "Reject", {"target_workers": 2, "strategy": "batched"}, applier)
    assert person.answer is not None and person.answer[0] == 200, person.answer
    states = _states(dr)
    assert states["approve"] == "success" and states["cancel_unapproved"] == "success", states
    assert {states[t] for t in ("mark_approved", "emit", "await_checkpoints", "verify")} == {"skipped"}, states
    plan = store.recent_plans(db_url, job=env)[0]
    assert plan.status == "cancelled" and f"rejected by {USER}" in plan.reason and plan.finished_at is not None
    assert store.plan_steps(db_url, plan.plan_id) and not any(s.emitted for s in store.plan_steps(db_url, plan.plan_id))
    assert applier.seen == [], "a rejected plan must not reach the control topic"
    assert store.events(db_url, env, kind="plan_cancelled")


def test_unanswered_approval_times_out_to_reject_and_cancels(seeded_job, db_url, kafka_bootstrap):  # noqa: F811 (fixture)
    """Nobody answers: the scheduler's own sweep (the part of the scheduler that resolves HITL
    deadlines) applies the default answer, Reject, and the plan is cancelled, nothing sent."""
    from datetime import timedelta

    from airflow.jobs.job import Job
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    env = seeded_job
    dag = _load("ballast_migrate").make_dag(load_jobs(), approval_timeout=timedelta(seconds=3))
    sweeper = SchedulerJobRunner(job=Job())
    halt = threading.Event()

    def sweep() -> None:
        while not halt.is_set():
            sweeper.check_awaiting_input_timeouts()
            time.sleep(1)

    applier = StepApplier(kafka_bootstrap, db_url, env)
    applier.start()
    th = threading.Thread(target=sweep, daemon=True)
    th.start()
    try:
        dr = dag.test(run_conf={"job": env, "target_workers": 2, "strategy": "batched", "dry_run": False})
    finally:
        halt.set()
        th.join(timeout=10)
        applier.stop()
    states = _states(dr)
    assert states["approve"] == "success" and states["emit"] == "skipped", states
    plan = store.recent_plans(db_url, job=env)[0]
    assert plan.status == "cancelled" and "no answer within 0:00:03" in plan.reason, plan.reason
    assert applier.seen == []
