"""The supervisor's health verdicts, and real launches: a job started through each launcher (`cli`,
and `spark-submit` through the provider's SparkSubmitHook.submit) with a metrics-DB URL that
carries a password keeps that password off every command line and out of the events, and
`stack.py down` stops it (the console: test_console.py; the hooks: test_hooks.py); a stale job is
relaunched, its old driver stopped only when this supervisor launched it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ballast.config import JobConfig, get_job
from migrations_db import models as m
from migrations_db.db import migrate, session_scope
from tests.helpers.jobs import write_jobs_file

pytestmark = pytest.mark.controlplane
REPO = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-" + uuid.uuid4().hex[:10]


def test_supervisor_health_verdicts(db_url, jobs_file, unique_name):
    from ballast import supervisor

    jobs_file(bins=16)
    cfg = get_job(unique_name)
    assert supervisor.check(cfg, db_url).status == "missing"
    now = datetime.now(UTC)
    with session_scope(db_url) as s:
        s.add(m.Heartbeat(job=unique_name, operator="keycount", last_epoch=7, map_version=0, workers=1,
                          updated_at=now, started_at=now, pid=1, host="h", status="running"))
    h = supervisor.check(cfg, db_url)
    assert h.status == "healthy" and "epoch 7" in h.message
    later = now + timedelta(seconds=cfg.heartbeat_timeout_s + 5)
    h = supervisor.check(cfg, db_url, now=later)
    assert h.status == "stale" and "old" in h.message


def test_supervisor_waits_out_the_outage_its_driver_may_be_waiting(db_url, jobs_file, unique_name, tmp_path,
                                                                   monkeypatch):
    """A driver declares (with its fencing token) how long it may wait out a DB or Kafka outage:
    its heartbeat is stale only after the timeout plus that; a driver this supervisor launched and
    that has exited waits for nothing, so its heartbeat is stale after the timeout alone."""
    from ballast import supervisor
    from ballast.store import fencing

    monkeypatch.setenv("BALLAST_STATE_DIR", str(tmp_path / "state"))
    jobs_file(bins=16)
    cfg = get_job(unique_name)
    now = datetime.now(UTC)
    with session_scope(db_url) as s:
        s.add(m.Heartbeat(job=unique_name, operator="keycount", last_epoch=7, map_version=0, workers=1,
                          updated_at=now, started_at=now, pid=1, host="h", status="running"))
    fencing.take_token(db_url, unique_name, "keycount", now, outage_s=600.0)
    waiting = now + timedelta(seconds=cfg.heartbeat_timeout_s + 300)
    assert supervisor.check(cfg, db_url, now=waiting).status == "healthy"
    h = supervisor.check(cfg, db_url, now=now + timedelta(seconds=cfg.heartbeat_timeout_s + 605))
    assert h.status == "stale" and f"> {cfg.heartbeat_timeout_s:.0f}s + 600s of outage waits" in h.message, h
    exited = subprocess.Popen([sys.executable, "-c", "pass"])
    exited.wait()
    cfg.state_dir().mkdir(parents=True)
    (cfg.state_dir() / supervisor.PID_FILE).write_text(str(exited.pid))  # ours, and gone
    h = supervisor.check(cfg, db_url, now=waiting)
    assert h.status == "stale" and "outage" not in h.message, h


def test_data_plane_command_line(jobs_file, unique_name):
    from ballast import supervisor

    jobs_file(bins=16)
    cmd = supervisor.cli_command(get_job(unique_name), "127.0.0.1:9092")
    assert cmd[1:4] == ["-m", "spark_jobs.cli", "run"] and "--db-url" not in cmd
    assert cmd[cmd.index("--bins") + 1] == "16" and cmd[cmd.index("--input-topic") + 1] == f"{unique_name}.in"
    # the signal thresholds reach the driver as the guards use them (band around the target, budget, bounds)
    from spark_jobs.cli import parser, signal_from_args

    cfg = get_job(unique_name)
    sig = signal_from_args(parser().parse_args(cmd[3:]))
    rb = cfg.rebalance
    assert sig.epochs == rb.signal_epochs == 5 and sig.hold_s == rb.signal_hold_s
    assert sig.busy_low == pytest.approx(rb.target_utilization - rb.utilization_band)
    assert sig.busy_high == pytest.approx(rb.target_utilization + rb.utilization_band)
    assert sig.budget_ms == rb.batch_budget_s * 1000 and sig.idle_hold_s == rb.scale_down_delay_s
    assert (sig.min_workers, sig.max_workers) == (cfg.min_workers, cfg.max_workers)


def test_redact_masks_url_passwords_and_secret_flags():
    from ballast.supervisor import redact

    argv = ["x", "--url", "postgresql://u:pw1@h:5432/d", "--sasl-password", "pw2", "--api-token=pw3", "--bins", "8"]
    shown = " ".join(redact(argv))
    assert not any(p in shown for p in ("pw1", "pw2", "pw3"))
    assert "postgresql://u:***@h:5432/d" in shown and "--bins 8" in shown


def test_spark_submit_launcher_refuses_cluster_mode_and_a_missing_connection(airflow_db, monkeypatch):
    """Cluster deploy mode would start the driver without the secrets' environment; a missing
    connection would make the provider fall back to YARN: both are a clear error before any launch."""
    from ballast.supervisor import LaunchError, launcher_command

    cfg = JobConfig(job="j", operator="keycount", input_topic="t", launcher="spark-submit",
                    spark_conn_id="ballast_test_cluster_spark")
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_TEST_CLUSTER_SPARK",
                       json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}))
    with pytest.raises(LaunchError, match="client mode"):
        launcher_command(cfg, "127.0.0.1:9092")
    monkeypatch.delenv("AIRFLOW_CONN_BALLAST_TEST_CLUSTER_SPARK")
    with pytest.raises(LaunchError, match="needs the Airflow connection 'ballast_test_cluster_spark'"):
        launcher_command(cfg, "127.0.0.1:9092")
    local = json.dumps({"conn_type": "spark", "host": "local[2]"})
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_TEST_CLUSTER_SPARK", local)
    cmd, env = launcher_command(cfg, "127.0.0.1:9092")
    assert cmd[1:] == ["-m", "ballast.launch", "--job", "j"]
    spec = json.loads(env["BALLAST_SUBMIT"])
    assert spec["hook"]["application_args"][0] == "run" and spec["application"].endswith("spark_jobs/main.py")


@pytest.fixture(scope="module")
def secret_db_url(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A migrated database on its own PostgreSQL cluster, addressed by a URL with a password
    (the cluster trusts loopback, so the password is accepted: the job connects with this URL)."""
    stack = sys.modules["ballast_stack"]  # loaded by tests/conftest.py
    pg = stack.Postgres(tmp_path_factory.mktemp("pg-sup"), stack.free_port(), name="pg-sup")
    try:
        pg.up()
    except stack.StackError as exc:
        pytest.fail(f"PostgreSQL could not start: {exc}")
    url = pg.url.replace("ballast@", f"ballast:{PASSWORD}@")
    migrate(url)
    yield url
    pg.down()
    pg.clean()


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["cli", "spark-submit"])
def test_launch_keeps_secrets_off_argv_and_events_and_stack_down_stops_it(
        launcher, secret_db_url, kafka_bootstrap, make_topics, unique_name, tmp_path, monkeypatch, airflow_db):
    from ballast import store, supervisor

    state = tmp_path / "state"
    monkeypatch.setenv("BALLAST_STATE_DIR", str(state))
    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_TEST_LOCAL_SPARK", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    job = unique_name[-20:].strip("-")
    make_topics({f"{job}.in": 2})
    cfg = JobConfig(job=job, operator="keycount", input_topic=f"{job}.in", bins=16, launcher=launcher,
                    spark_conn_id="ballast_test_local_spark")
    pid = supervisor.launch(cfg, kafka_bootstrap, secret_db_url, reason="test")
    try:
        deadline = time.time() + 240
        while store.heartbeat(secret_db_url, job, "keycount") is None:  # only a driver with the URL can write it
            assert supervisor.group_members(pid), (state / "jobs" / job / "driver.log").read_text()[-3000:]
            assert time.time() < deadline, "no heartbeat in 240 s"
            time.sleep(2)
        members = supervisor.group_members(pid)
        drivers = [p for p in members if "spark_jobs" in _cmdline(p)]
        assert drivers, [_cmdline(p) for p in members]
        if launcher == "spark-submit":  # the hook's spark-submit JVM runs under our launcher
            assert "ballast.launch" in _cmdline(pid)
            assert any("org.apache.spark.deploy.SparkSubmit" in _cmdline(p) for p in members)
        for p in members:
            assert PASSWORD not in _cmdline(p), f"password on the command line of pid {p}: {_cmdline(p)}"
        environ = Path(f"/proc/{drivers[-1]}/environ").read_bytes().decode(errors="replace")
        assert f"BALLAST_DB_URL={secret_db_url}" in environ  # it reached the driver by environment
        stored = json.dumps([(e.kind, e.message, e.details) for e in store.events(secret_db_url, job, limit=10_000)])
        assert "launch" in stored and PASSWORD not in stored
        launch = store.events(secret_db_url, job, "keycount", kind="launch")[0]
        assert launch.details["pid"] == pid and "--db-url" not in launch.details["cmd"]
    finally:
        env = {**os.environ, "BALLAST_STATE_DIR": str(state)}
        down = subprocess.run([sys.executable, "scripts/stack.py", "down", "jobs"], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"job {job}: stopped pid {pid}" in down.stdout, down.stdout
    assert not supervisor.group_members(pid) and not (state / "jobs" / job / "driver.pid").exists()


def test_a_chain_is_healthy_only_when_every_operator_beats(db_url, tmp_path, unique_name):
    """A chain runs its operators' loops in one application: the second one stuck while the first
    still beats is a stuck job, and the verdict names it."""
    from ballast import supervisor
    from ballast.config import load_jobs

    job = unique_name
    path = tmp_path / "jobs.yaml"
    path.write_text(f"jobs:\n  - job: {job}\n    input_topic: {job}.in\n    bins: 16\n    operators:\n"
                    "      - {name: split, operator: wordcount}\n      - {name: counts, operator: keycount}\n")
    cfg = load_jobs(path)[job]
    now = datetime.now(UTC)
    later = now + timedelta(seconds=cfg.heartbeat_timeout_s + 5)
    with session_scope(db_url) as s:
        s.add(m.Heartbeat(job=job, operator="split", last_epoch=9, map_version=0, workers=1,
                          updated_at=later, started_at=now, pid=1, host="h", status="running"))
    h = supervisor.check(cfg, db_url, now=later)
    assert h.status == "missing" and h.message.startswith("operator counts:"), h
    with session_scope(db_url) as s:
        s.add(m.Heartbeat(job=job, operator="counts", last_epoch=4, map_version=0, workers=1,
                          updated_at=now, started_at=now, pid=1, host="h", status="running"))
    h = supervisor.check(cfg, db_url, now=later)
    assert h.status == "stale" and h.message.startswith("operator counts: heartbeat is") and "epoch 4" in h.message, h
    with session_scope(db_url) as s:
        s.get(m.Heartbeat, (job, "counts")).updated_at = later  # type: ignore[union-attr]
    h = supervisor.check(cfg, db_url, now=later)
    assert h.status == "healthy" and "epoch 9" in h.message and "1 more operator" in h.message, h


# A stand-in for the data-plane driver: a process group with a child (its "JVM"). On SIGTERM it
# notes the signal, stops its child and exits, as the driver does after its current epoch.
STAND_IN = """
import os, signal, subprocess, sys, time
marks = sys.argv[sys.argv.index("--marks") + 1]
child = None
def term(sig, frame):
    open(os.path.join(marks, f"{os.getpid()}.signal"), "w").write(signal.Signals(sig).name)
    child.terminate()
    child.wait()
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
child = subprocess.Popen(["sleep", "300"])
open(os.path.join(marks, f"{os.getpid()}.started"), "w").write(str(child.pid))
while True:
    time.sleep(1)
"""


def _wait_started(marks: Path, pid: int) -> int:
    """The pid of the stand-in's child, once the stand-in handles SIGTERM."""
    deadline = time.monotonic() + 20
    while not (marks / f"{pid}.started").exists():
        assert time.monotonic() < deadline, f"stand-in driver {pid} did not start"
        time.sleep(0.05)
    return int((marks / f"{pid}.started").read_text())


def test_a_driver_just_launched_is_recognised_as_ours(tmp_path):
    """Popen returns while the kernel is still inside exec(): /proc/<pid>/cmdline reads empty for a
    moment (about every second launch here). The supervisor must not take its own new driver for
    a foreign process then (CI once did: the relaunched driver's pid file was judged not ours)."""
    from ballast import supervisor

    pid_file = tmp_path / supervisor.PID_FILE
    for _ in range(200):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--job", "j1"],
                                start_new_session=True)
        try:
            pid_file.write_text(str(proc.pid))
            assert supervisor.launched_pid(pid_file, "j1") == proc.pid
            assert supervisor.launched_pid(pid_file, "j2") is None  # another job's name: not ours
        finally:
            proc.kill()
            proc.wait()


def test_supervise_relaunches_a_stale_job_and_stops_only_the_driver_it_launched(
        db_url, kafka_bootstrap, tmp_path, monkeypatch, unique_name):
    """Real processes, DB and broker; only the data-plane command is a stand-in (a real driver
    needs Spark): missing heartbeat → `start` and a launch; stale with our driver alive → SIGTERM
    to it (its group ends), a new driver and a `restart`; a pid file naming a process it did not
    launch → that process is left alone, and the job is relaunched all the same."""
    from ballast import store, supervisor

    monkeypatch.setenv("BALLAST_STATE_DIR", str(tmp_path / "state"))
    # startup_grace_s 0: a relaunch right after a launch is judged by the heartbeat alone
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(write_jobs_file(tmp_path / "jobs.yaml", unique_name, 16,
                                                                startup_grace_s=0)))
    cfg = get_job(unique_name)
    marks, script = tmp_path / "marks", tmp_path / "driver.py"
    marks.mkdir()
    script.write_text(STAND_IN)
    monkeypatch.setattr(supervisor, "cli_command",
                        lambda c, bootstrap: [sys.executable, str(script), "--job", c.job, "--marks", str(marks)])
    pid_file = cfg.state_dir() / supervisor.PID_FILE
    launched: list[int] = []
    foreign = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        h = supervisor.supervise(cfg, kafka_bootstrap, db_url)  # never ran: no heartbeat
        assert h.status == "starting" and h.pid is not None and "no heartbeat" in h.message, h
        first = h.pid
        launched.append(first)
        first_child = _wait_started(marks, first)
        assert [e.kind for e in store.events(db_url, unique_name, "keycount", kind="start")] == ["start"]

        now = datetime.now(UTC)
        with session_scope(db_url) as s:  # the driver stopped beating long ago
            s.add(m.Heartbeat(job=unique_name, operator="keycount", last_epoch=7, map_version=0, workers=1,
                              updated_at=now - timedelta(seconds=cfg.heartbeat_timeout_s + 60), started_at=now,
                              pid=first, host="h", status="running"))
        assert supervisor.check(cfg, db_url).status == "stale"
        h = supervisor.supervise(cfg, kafka_bootstrap, db_url)
        assert h.status == "starting" and h.pid not in (None, first), h
        assert h.pid is not None
        second = h.pid
        launched.append(second)
        assert (marks / f"{first}.signal").read_text() == "SIGTERM"  # stopped gracefully, not killed
        assert not supervisor.group_members(first)  # the old group is gone, its child too
        assert not Path(f"/proc/{first_child}").exists()
        assert supervisor.launched_pid(pid_file, unique_name) == second
        _wait_started(marks, second)
        [restart] = store.events(db_url, unique_name, "keycount", kind="restart")
        assert "heartbeat is" in restart.message and "old" in restart.message
        launches = store.events(db_url, unique_name, "keycount", kind="launch")
        assert sorted(e.details["pid"] for e in launches) == sorted([first, second])

        pid_file.write_text(str(foreign.pid))  # a pid file naming a process this supervisor did not launch
        with session_scope(db_url) as s:  # older still (an identical event message would be stored once)
            s.get(m.Heartbeat, (unique_name, "keycount")).updated_at = now - timedelta(hours=1)  # type: ignore[union-attr]
        h = supervisor.supervise(cfg, kafka_bootstrap, db_url)
        assert h.pid not in (None, foreign.pid, second), h
        assert h.pid is not None
        launched.append(h.pid)
        time.sleep(0.5)
        assert foreign.poll() is None  # left alone
        assert not (marks / f"{second}.signal").exists()  # the driver it can no longer name is not signalled
        assert len(store.events(db_url, unique_name, "keycount", kind="restart")) == 2
        assert supervisor.launched_pid(pid_file, unique_name) == h.pid
    finally:
        for pid in launched:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        foreign.kill()
        foreign.wait()
