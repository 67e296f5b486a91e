"""What every service of the local stack shares: its addresses and dirs, pid files, start-up waits.

The service modules (stack_kafka, stack_airflow, stack_postgres) each hold one service and build
on these; scripts/stack.py is the CLI that wires them. A service is a process group started
here, known by its pid file, and stopped by that pid only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ballast.errors import BallastError
from ballast.options import settings

REPO = Path(__file__).resolve().parent.parent
_OPTS = settings()
STATE = _OPTS.state_dir
CACHE = _OPTS.cache_dir
HOST = "127.0.0.1"
KAFKA_PORT = _OPTS.kafka_port
KAFKA_CONTROLLER_PORT = _OPTS.kafka_controller_port
AIRFLOW_PORT = _OPTS.airflow_port
PG_PORT = _OPTS.pg_port
ADMIN_USER, ADMIN_PASSWORD = "admin", _OPTS.airflow_password


class StackError(BallastError, RuntimeError):
    """A service could not be brought up; the message says what to do."""


def log(msg: str) -> None:
    print(f"[ballast-stack] {msg}", flush=True)


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on now (for services and tests on their own ports)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_open(port: int, host: str = HOST) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def port_bindable(port: int, host: str = HOST) -> bool:
    """Whether a server could listen on `port` now. Stricter than `port_open`: a client socket that
    the kernel gave this port as its ephemeral local port accepts no connection, yet a server's
    bind to it fails (EADDRINUSE)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do: TIME_WAIT does not count
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def ephemeral_ports() -> range:
    """The kernel's range of ephemeral (client) ports; Linux's default when it cannot be read. Why:
    a service on a fixed port inside it races every outgoing connection on the machine for it."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def require_free_port(port: int, env: str, host: str = HOST) -> None:
    """A StackError that says who holds `port` and what to do, unless a server could listen there now.
    By binding, not connecting: a client socket on the port accepts no connection, yet the server's
    bind would fail (the kernel gives ports of its ephemeral range to outgoing connections)."""
    if port_bindable(port, host):
        return
    why = "a server listens there" if port_open(port, host) else "a connection holds it"
    eph = ephemeral_ports()
    hint = (f" to a port below the kernel's ephemeral range {eph.start}-{eph.stop - 1}, where any outgoing "
            "connection may take it" if port in eph else "")
    raise StackError(f"port {port} on {host} is taken ({why}): stop that process or set {env}{hint}")


def pid_alive(pidfile: Path) -> int | None:
    """The pid in `pidfile` when that process still runs (a reaped child counts as gone)."""
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    try:  # started by this very process (tests): an exited child is a zombie until reaped
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return None
    except ChildProcessError:  # not our child (`make up` ran in another process): kill(0) said enough
        pass
    return pid


# Every process a service starts carries this variable (inherited down its whole tree), set to the
# service's pid file: `stop` finds children that left the group or outlived their parent by it.
# Jobs the supervisor launches from inside Airflow drop it: they are not part of Airflow's tree.
TAG_VAR = "BALLAST_SERVICE_TAG"


def spawn(cmd: list[str], logfile: Path, pidfile: Path, env: dict[str, str] | None = None) -> int:
    """Start `cmd` in its own process group, output to `logfile`, its pid into `pidfile`."""
    logfile.parent.mkdir(parents=True, exist_ok=True)
    env = {**(env or os.environ), TAG_VAR: service_tag(pidfile)}
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, cwd=REPO,
        )
    pidfile.write_text(str(proc.pid))
    return proc.pid


def service_tag(pidfile: Path) -> str:
    """The tag of the service known by `pidfile` (its absolute path: unique per checkout and state dir)."""
    return str(pidfile.resolve())


def tagged(tag: str, var: str = TAG_VAR, prefix: bool = False) -> list[int]:
    """Pids of the running processes started under `tag` (`var=tag` in /proc/<pid>/environ, or a
    tag starting with `tag` when `prefix`; only our own user's processes are readable, which are
    the only ones we could have started)."""
    needle = f"{var}={tag}".encode()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            hit = any(v.startswith(needle) for v in env) if prefix else needle in env
            if hit and not _zombie(int(d.name)):
                found.append(int(d.name))
        except OSError:  # gone meanwhile, or another user's
            continue
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def stop(name: str, pidfile: Path, timeout: float = 30.0, sig: int = signal.SIGTERM) -> None:
    """Stop a service's whole process tree: signal its group, SIGKILL the group after `timeout`,
    then end what is left under its tag (children that left the group, or that ignore SIGTERM and
    outlived their parent: Airflow's scheduler leaves such workers re-parented to init) with
    SIGTERM, then SIGKILL. Removes the pid file."""
    pid = pid_alive(pidfile)
    tag = service_tag(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        if not _end_leftovers(name, tag, grace_s=5.0):
            log(f"{name}: not running")
        return
    os.killpg(pid, sig)
    deadline = time.time() + timeout
    while time.time() < deadline and pid_alive(pidfile):
        time.sleep(0.3)
    if pid_alive(pidfile):
        log(f"{name}: did not stop in {timeout:.0f}s, killing")
        os.killpg(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)
    _end_group(name, pid, grace_s=min(timeout, 5.0))
    _end_leftovers(name, tag, grace_s=min(timeout, 10.0))
    log(f"{name}: stopped")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _end_group(name: str, pgid: int, grace_s: float) -> None:
    """SIGKILL what is left of the service's process group after its leader is gone. Airflow's
    LocalExecutor workers catch SIGTERM and stay, idle, re-parented to init, and their title
    (setproctitle) overwrites the environment that carries the tag `_end_leftovers` looks for: a
    clean clone's `make test` left 32 of them behind. A group id is not reused while a member lives,
    so this reaches the service's processes only."""
    deadline = time.time() + grace_s
    while time.time() < deadline and _group_alive(pgid):
        time.sleep(0.2)
    if _group_alive(pgid):
        log(f"{name}: processes of its group outlived it (SIGTERM caught): killing the group")
        os.killpg(pgid, signal.SIGKILL)


def _end_leftovers(name: str, tag: str, grace_s: float) -> list[int]:
    """SIGTERM the processes still under `tag`, SIGKILL them after `grace_s`; the pids it found."""
    left = tagged(tag)
    if not left:
        return []
    log(f"{name}: {len(left)} process(es) of it still run (pids {', '.join(map(str, left))}): stopping them")
    _signal_all(left, signal.SIGTERM)
    deadline = time.time() + grace_s
    while time.time() < deadline and tagged(tag):
        time.sleep(0.2)
    rest = tagged(tag)
    if rest:
        log(f"{name}: pids {', '.join(map(str, rest))} ignored SIGTERM for {grace_s:.0f}s: killing them")
        _signal_all(rest, signal.SIGKILL)
        deadline = time.time() + 10
        while time.time() < deadline and tagged(tag):
            time.sleep(0.1)
    return left


def wait_healthy(check: Callable[[], bool], what: str, timeout: float, logfile: Path, pidfile: Path) -> None:
    """Poll `check` until true; a StackError with the log's tail when the process dies or time runs out."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        if not pid_alive(pidfile):
            tail = logfile.read_text(errors="replace")[-3000:] if logfile.exists() else ""
            raise StackError(f"{what} exited during start-up; last log lines ({logfile}):\n{tail}")
        time.sleep(0.5)
    raise StackError(f"{what} did not become healthy within {timeout:.0f}s; see {logfile}")


def need_java() -> str:
    java = shutil.which("java")
    if not java:
        raise StackError("Java is missing: install a JDK 17+ (Debian: apt-get install -y openjdk-17-jre-headless)")
    return java


#: every Debian install of the project (setup.sh's, PostgreSQL's, the browser tests' chromium) holds
#: this lock: two test workers that each need a package at once would otherwise meet dpkg's own lock,
#: and the loser fails ("Could not get lock /var/lib/dpkg/lock-frontend"), as a fresh clone's run did
APT_LOCK = Path("/tmp/ballast-apt.lock")
#: and apt itself waits for a lock an outside apt (unattended upgrades, a person) holds, not fails
APT_WAIT = ["-o", "DPkg::Lock::Timeout=900"]


def apt_install(packages: list[str], recommends: bool = True, env: dict[str, str] | None = None,
                timeout_s: float = 1800.0) -> subprocess.CompletedProcess[str]:
    """`apt-get update` then `apt-get install -y` of `packages` (Debian, as root), one install at a time
    across processes (APT_LOCK). The caller checks that what it needs is then there: a package another
    process installed while this one waited is simply already installed. `env`: added to the process's."""
    import fcntl

    full = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", **(env or {})}
    opts = [] if recommends else ["--no-install-recommends"]
    with open(APT_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or the process dies
        subprocess.run(["apt-get", *APT_WAIT, "update", "-qq"], env=full, capture_output=True, timeout=900)
        return subprocess.run(["apt-get", *APT_WAIT, "install", "-y", "-qq", *opts, *packages], env=full,
                              capture_output=True, text=True, timeout=timeout_s)
