"""`make up` / `make status` / `make down` on an isolated state dir and ports: services come up
healthy, Airflow's API answers, and `down` stops everything it started."""

import json
import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from scripts import stack_procs
from tests.helpers.procs import free_port
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.foundation, pytest.mark.services]  # `make up` / `make down` on ports of its own
REPO = Path(__file__).resolve().parents[2]


def _version(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/version", timeout=10) as r:
            return str(json.load(r)["version"])
    except OSError:
        return None


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def isolated_env(tmp_path):
    env = os.environ.copy()
    env.update({
        "BALLAST_STATE_DIR": str(tmp_path / "state"),
        "BALLAST_KAFKA_PORT": str(free_port()),
        "BALLAST_KAFKA_CONTROLLER_PORT": str(free_port()),
        "BALLAST_AIRFLOW_PORT": str(free_port()),
    })
    env.pop("BALLAST_DB_URL", None)
    yield env
    subprocess.run(["make", "down"], cwd=REPO, env=env, capture_output=True, timeout=120)


@pytest.mark.slow
def test_make_up_status_down(isolated_env):
    """`make up` as a user runs it: no opt-out, so secure by default (SASL/SCRAM + ACLs, signed
    control messages with a key made at the first run, kept by the second)."""
    env = isolated_env
    env.pop("BALLAST_KAFKA_AUTH", None)  # tests/conftest.py opts the suite out; a user has neither set
    env.pop("BALLAST_CONTROL_SIGNING", None)
    state = Path(env["BALLAST_STATE_DIR"])
    up = subprocess.run(["make", "up"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    assert "login: admin / " in up.stdout
    key = json.loads((state / "secrets" / "control-signing.json").read_text())
    assert "with SASL/SCRAM + ACLs" in up.stdout and f"control messages signed with key id {key['kid']}" in up.stdout
    assert key["secret"] not in up.stdout + up.stderr
    for secret in (state / "secrets" / "control-signing.json", state / "kafka" / "scram-users.json"):
        assert secret.stat().st_mode & 0o777 == 0o600, secret
    port = int(env["BALLAST_AIRFLOW_PORT"])
    # the API answered `make up`; on a loaded machine its next answer can take longer than one probe
    version = wait_until(lambda: _version(port), 120, "Airflow's API to answer", poll=1.0)
    assert version.startswith("3.3")
    assert _port_open(int(env["BALLAST_KAFKA_PORT"]))
    assert (Path(env["BALLAST_STATE_DIR"]) / "metrics.db").exists()

    again = subprocess.run(["make", "up"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already running" in again.stdout  # idempotent
    assert json.loads((state / "secrets" / "control-signing.json").read_text()) == key  # the jobs' key is kept

    status = subprocess.run(["make", "status"], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert status.returncode == 0 and "kafka     up" in status.stdout and "airflow   up" in status.stdout

    tree = _service_processes(state)
    assert len(tree) > 2, tree  # Kafka, Airflow standalone and its children (scheduler, api-server, ...)
    down = subprocess.run(["make", "down"], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not _service_processes(state), "stopped means stopped: processes of the stack still run"
    assert not _port_open(port) and not _port_open(int(env["BALLAST_KAFKA_PORT"]))
    assert not list(Path(env["BALLAST_STATE_DIR"]).glob("*.pid"))
    status = subprocess.run(["make", "status"], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert status.returncode != 0 and "kafka     down" in status.stdout


def _service_processes(state: Path) -> list[int]:
    """Running processes started by the stack whose state dir is `state` (by their service tag)."""
    return stack_procs.tagged(f"{state.resolve()}/", prefix=True)


DEAF_TREE = """
import os, signal, subprocess, sys, time
deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(300)"
kids = [subprocess.Popen([sys.executable, "-c", deaf], stdout=subprocess.PIPE, text=True),  # same group
        subprocess.Popen([sys.executable, "-c", deaf], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)]  # left the group
for k in kids:
    k.stdout.readline()
open(sys.argv[1], "w").write(" ".join(str(k.pid) for k in kids))
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # the parent goes at once; its children stay
time.sleep(300)
"""


def test_stop_ends_the_whole_tree_even_children_that_ignore_sigterm_or_left_the_group(tmp_path):
    """Airflow's scheduler left workers re-parented to init and deaf to SIGTERM after `make down`:
    `stop` ends every process started under the service's tag, and nothing else."""
    pidfile, kids_file = tmp_path / "svc.pid", tmp_path / "kids"
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    pid = stack_procs.spawn([sys.executable, "-c", DEAF_TREE, str(kids_file)], tmp_path / "svc.log", pidfile)
    try:
        wait_until(kids_file.exists, 30, "the service's children to start", poll=0.1)
        kids = [int(k) for k in kids_file.read_text().split()]
        assert sorted(stack_procs.tagged(stack_procs.service_tag(pidfile))) == sorted([pid, *kids])
        stack_procs.stop("svc", pidfile, timeout=2)
        assert not stack_procs.tagged(stack_procs.service_tag(pidfile))
        assert stranger.poll() is None  # untagged: never signalled
        assert not pidfile.exists()
    finally:
        for k in [pid, *(int(k) for k in kids_file.read_text().split())] if kids_file.exists() else [pid]:
            try:
                os.kill(k, 9)
            except ProcessLookupError:
                pass
        stranger.kill()
        stranger.wait()


def test_taken_port_is_a_clear_error(isolated_env):
    env = isolated_env
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        env["BALLAST_KAFKA_PORT"] = str(busy.getsockname()[1])
        res = subprocess.run([sys.executable, "scripts/stack.py", "up", "kafka"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 1
    assert f"port {env['BALLAST_KAFKA_PORT']} on 127.0.0.1 is taken" in res.stdout
    assert "BALLAST_KAFKA_PORT" in res.stdout


def test_missing_java_is_a_clear_error(isolated_env):
    env = dict(isolated_env)
    env["PATH"] = str(Path(sys.executable).parent)  # the venv only: no java
    res = subprocess.run([sys.executable, "scripts/stack.py", "up", "kafka"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "Java is missing" in res.stdout


def test_down_signals_only_processes_that_still_run_their_job(tmp_path):
    """`down`'s job stop goes by pid file and checks the argv: a pid file whose pid now runs something
    else (pid reuse) is removed without a signal; one that runs its job is stopped with its group."""
    jobs = tmp_path / "state" / "jobs"
    (jobs / "gone").mkdir(parents=True)
    (jobs / "reused").mkdir()
    (jobs / "alive").mkdir()
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    ours = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", "--job", "alive"],
                            start_new_session=True)
    try:
        (jobs / "gone" / "driver.pid").write_text("999999999")
        (jobs / "reused" / "driver.pid").write_text(str(stranger.pid))
        (jobs / "alive" / "driver.pid").write_text(str(ours.pid))
        env = {**os.environ, "BALLAST_STATE_DIR": str(tmp_path / "state")}
        res = subprocess.run([sys.executable, "scripts/stack.py", "down", "jobs"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"job alive: stopped pid {ours.pid} and its process group (SIGTERM)" in res.stdout
        assert "job reused: not running" in res.stdout and "job gone: not running" in res.stdout
        assert ours.wait(timeout=10) == -15
        assert stranger.poll() is None  # never signalled
        assert not list(jobs.glob("*/driver.pid"))
    finally:
        stranger.kill()
        ours.kill()
        stranger.wait()
        ours.wait()


def test_status_waits_for_a_running_service_to_answer_and_says_when_it_does_not(tmp_path):
    """`status` gives a live process time to answer (a loaded machine's API can miss one probe), says
    'not answering' with its pid when it never does, and 'down' without a process or when it ends."""
    from scripts import stack

    proc = subprocess.Popen(["sleep", "300"])
    try:
        pid_file = tmp_path / "svc.pid"
        pid_file.write_text(str(proc.pid))
        answers = iter([False, False, True])
        assert stack.probe(pid_file, lambda: next(answers), patience_s=10) == "up"
        assert stack.probe(pid_file, lambda: False, patience_s=1.5) == (
            f"not answering (process {proc.pid} runs; its log is under {stack.STATE})")
        proc.kill()
        proc.wait()
        assert stack.probe(pid_file, lambda: False, patience_s=10) == "down"
        assert stack.probe(tmp_path / "never.pid", lambda: True, patience_s=10) == "down"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(("first", "then"), [("none", "scram"), ("scram", "none")])
def test_a_broker_formatted_in_the_other_auth_mode_refuses_to_start(tmp_path, first, then):
    """Its data was formatted (and its SCRAM users written) in one mode: starting it in the other is
    refused, naming `make clean`, instead of a broker that half works."""
    import ballast_stack as stack  # scripts/stack.py, loaded by tests/conftest.py

    from tests.helpers.brokers import own_broker

    with own_broker(tmp_path, f"kafka-{first}", auth=first) as b:
        port, controller_port = b.port, b.controller_port
    again = stack.KafkaBroker(tmp_path, port, controller_port, auth=then, name=f"kafka-{first}")
    with pytest.raises(stack.StackError, match=f"formatted with BALLAST_KAFKA_AUTH={first}, not {then}.*make clean"):
        again.up()
    assert not again.alive()


def test_the_s3_server_comes_up_serves_its_bucket_with_its_keys_and_goes_down(isolated_env):
    """`stack.py up s3`: s3s-fs healthy on its port with bucket `ballast`; `s3-env` exports the
    AWS variables a job needs (the keys made once, 0600, and kept on a re-run); `down s3` stops it."""
    env = {**isolated_env, "BALLAST_S3_PORT": str(free_port())}
    stack = [sys.executable, "scripts/stack.py"]
    up = subprocess.run([*stack, "up", "s3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        keys = Path(env["BALLAST_STATE_DIR"]) / "secrets" / "s3.json"
        assert keys.stat().st_mode & 0o777 == 0o600
        exports = subprocess.run([*stack, "s3-env"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        aws = dict(line.removeprefix("export ").split("=", 1) for line in exports.stdout.splitlines())
        assert aws["AWS_ENDPOINT_URL"] == f"http://127.0.0.1:{env['BALLAST_S3_PORT']}"
        again = subprocess.run([*stack, "up", "s3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and "already running" in again.stdout, again.stdout + again.stderr
        probe = ("from spark_jobs.storage import Location; l = Location.of('s3://ballast/probe.json'); "
                 "l.write_json({'ok': 1}); print(l.read_json())")
        res = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env={**env, **aws}, capture_output=True,
                             text=True, timeout=60)
        assert res.stdout.strip() == "{'ok': 1}", res.stdout + res.stderr
        status = subprocess.run([*stack, "status", "s3"], cwd=REPO, env=env, capture_output=True, text=True,
                                timeout=60)
        assert status.returncode == 0 and "up" in status.stdout
    finally:
        down = subprocess.run([*stack, "down", "s3"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not _port_open(int(env["BALLAST_S3_PORT"]))


def test_an_s3_secret_key_that_begins_with_a_dash_starts_the_server(tmp_path):
    """A URL-safe secret begins with '-' one time in 64: s3s-fs must take it as the key's value, not as
    an option (it refused to start, and a test of the stack failed at random)."""
    import ballast_stack as stack  # scripts/stack.py, loaded by tests/conftest.py

    s3 = stack.S3Server(tmp_path, free_port())
    s3.keys_file.parent.mkdir(parents=True)
    s3.keys_file.write_text(json.dumps({"access_key": "-ballast-test", "secret_key": "-3dash-first-" + "x" * 27}))
    s3.keys_file.chmod(0o600)
    try:
        s3.up()
        assert s3.alive() and _port_open(s3.port)
        assert s3.keys()["secret_key"].startswith("-3dash")
    finally:
        s3.down()
    assert not _port_open(s3.port)
