"""The stack's port helpers: a port a connection holds is not free for a server, and the fixed ports
of the stack and of the test session lie outside the kernel's ephemeral range (CI once lost
PostgreSQL's 55432 to a client socket that held it as its local port)."""

import os
import socket
import time
from pathlib import Path

from ballast.options import settings
from scripts import stack_procs


def test_a_port_a_client_socket_holds_is_not_bindable_though_nothing_listens() -> None:
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # what connect() does for an outgoing connection's local port
    port = holder.getsockname()[1]
    try:
        assert not stack_procs.port_open(port)  # nothing accepts there...
        assert not stack_procs.port_bindable(port)  # ...yet a server cannot have it
    finally:
        holder.close()
    assert stack_procs.port_bindable(port)


def test_a_listening_port_is_not_bindable() -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert stack_procs.port_open(srv.getsockname()[1])
        assert not stack_procs.port_bindable(srv.getsockname()[1])


def test_the_ephemeral_range_is_the_kernels() -> None:
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert stack_procs.ephemeral_ports() == range(low, high + 1)


def test_fixed_service_ports_lie_outside_the_ephemeral_range(monkeypatch) -> None:
    """The defaults (`make up`) and the test session's own ports (tests/conftest.py) alike."""
    ephemeral = stack_procs.ephemeral_ports()
    names = ("BALLAST_KAFKA_PORT", "BALLAST_KAFKA_CONTROLLER_PORT", "BALLAST_PG_PORT")
    session = {k: int(os.environ[k]) for k in names}
    for k in session:
        monkeypatch.delenv(k)
    opts = settings()
    defaults = {"kafka": opts.kafka_port, "controller": opts.kafka_controller_port, "airflow": opts.airflow_port,
                "postgres": opts.pg_port}
    inside = {name: port for name, port in {**defaults, **session}.items() if port in ephemeral}
    assert not inside, f"in the ephemeral range {ephemeral.start}-{ephemeral.stop - 1}: {inside}"


def test_every_service_refuses_a_port_a_connection_holds_and_names_its_variable(tmp_path, monkeypatch) -> None:
    """Kafka (both ports), Airflow, PostgreSQL and the S3 server check their port by binding, before
    they start anything, and say which variable moves them (stack_procs.require_free_port)."""
    import importlib
    import sys

    import pytest

    kafka, airflow, pg, s3 = (importlib.import_module(m) for m in ("stack_kafka", "stack_airflow", "stack_postgres",
                                                                   "stack_s3"))
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))  # an outgoing connection's local port: nothing listens there
    held, free = holder.getsockname()[1], stack_procs.free_port()
    monkeypatch.setattr(airflow, "AIRFLOW_PORT", held)
    monkeypatch.setattr(airflow, "pid_alive", lambda _pidfile: None)  # not ours running: a fresh start
    monkeypatch.setattr(s3, "BINARY", type(tmp_path)(sys.executable))  # the check before the port's
    starts = {"BALLAST_KAFKA_PORT": lambda: kafka.KafkaBroker(tmp_path, held, free).up(),
              "BALLAST_KAFKA_CONTROLLER_PORT": lambda: kafka.KafkaBroker(tmp_path, free, held).up(),
              "BALLAST_AIRFLOW_PORT": airflow.airflow_up,
              "BALLAST_PG_PORT": lambda: pg.Postgres(tmp_path, held)._check_port(),
              "BALLAST_S3_PORT": lambda: s3.S3Server(tmp_path, held).up()}
    try:
        for variable, start in starts.items():
            with pytest.raises(kafka.StackError, match=rf"port {held} .*a connection holds it.*set {variable}"):
                start()
    finally:
        holder.close()
    assert not (tmp_path / "kafka" / "server.properties").exists(), "nothing was started or written"


def _apt_with_dpkgs_lock(tmp_path):  # type: ignore[no-untyped-def]
    """An `apt-get` on PATH with dpkg's lock behaviour: `install` takes a lock without waiting and
    fails as apt does when another install holds it (the clean-clone run's browser-test failure).
    Not Debian's apt: an install as root on a test machine is not a thing a test may do twice."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    apt = bindir / "apt-get"
    apt.write_text(f"""#!/bin/sh
case "$*" in *install*) ;; *) exit 0 ;; esac
exec 9>"{tmp_path}/lock-frontend"
flock -n 9 || {{ echo "E: Could not get lock {tmp_path}/lock-frontend" >&2; exit 100; }}
sleep 0.5
echo installed >> "{tmp_path}/installs"
""")
    apt.chmod(0o755)
    return bindir


def test_two_processes_installing_at_once_take_turns_instead_of_failing(tmp_path, monkeypatch) -> None:
    import threading

    bindir = _apt_with_dpkgs_lock(tmp_path)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(stack_procs, "APT_LOCK", tmp_path / "ballast-apt.lock")
    results: list[int] = []

    def install() -> None:
        results.append(stack_procs.apt_install(["chromium"]).returncode)

    threads = [threading.Thread(target=install) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0, 0, 0]
    assert (tmp_path / "installs").read_text().count("installed") == 3


def test_the_fake_apt_fails_when_two_installs_overlap(tmp_path, monkeypatch) -> None:
    """The test above would prove nothing if overlapping installs did not fail: without the lock they do."""
    import subprocess
    import threading

    bindir = _apt_with_dpkgs_lock(tmp_path)
    codes: list[int] = []

    def install() -> None:
        codes.append(subprocess.run([str(bindir / "apt-get"), "install", "-y", "x"], capture_output=True).returncode)

    threads = [threading.Thread(target=install) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [0, 100, 100]


def test_stop_ends_group_members_that_catch_sigterm_and_lost_their_tag(tmp_path, monkeypatch) -> None:
    """Airflow's LocalExecutor workers catch SIGTERM and their title overwrites the environment with
    the service's tag: only the process group still names them. A child started without the tag and
    ignoring SIGTERM stands in for them (started, then its leader stopped through stack_procs.stop)."""
    import subprocess

    pidfile = tmp_path / "svc.pid"
    child_pid = tmp_path / "child.pid"
    script = (f"env -u {stack_procs.TAG_VAR} sh -c 'trap \"\" TERM; echo $$ > {child_pid}; "
              "while :; do sleep 0.2; done' & wait")
    stack_procs.spawn(["sh", "-c", script], tmp_path / "svc.log", pidfile)
    deadline = time.time() + 10
    while not (child_pid.exists() and child_pid.read_text().strip()) and time.time() < deadline:
        time.sleep(0.1)
    pid = int(child_pid.read_text())
    assert stack_procs.service_tag(pidfile) not in (Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace"))
    try:
        stack_procs.stop("svc", pidfile, timeout=5.0)
        time.sleep(0.5)
        state = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
        assert state in ("", "Z"), f"pid {pid} still runs after stop(): state {state!r}"
    finally:
        try:
            os.kill(pid, 9)  # a failed run leaves nothing behind
        except ProcessLookupError:
            pass
