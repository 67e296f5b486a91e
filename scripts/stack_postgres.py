"""The local stack's throwaway PostgreSQL cluster (the tests' second dialect, and BALLAST_DB_URL).

As root, initdb/postgres run as the `postgres` user, who cannot enter a checkout under a 0700
directory (root's home, `mktemp -d`): the cluster (data, socket) then lives in its own 0700 dir
under postgres' /var/lib/postgresql, one per state dir so two checkouts never share a cluster.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from stack_procs import (
    HOST,
    PG_PORT,
    STATE,
    StackError,
    apt_install,
    log,
    pid_alive,
    port_open,
    require_free_port,
    spawn,
    stop,
    wait_healthy,
)


class Postgres:
    """One throwaway PostgreSQL cluster for the state dir `root`, on `port` (installs Debian's
    postgresql when absent). As root the cluster lives under /var/lib/postgresql (see above)."""

    def __init__(self, root: Path, port: int, name: str = "postgres") -> None:
        self.root, self.port, self.name = root, port, name
        key = hashlib.sha256(f"{root.resolve()}:{name}".encode() if name != "postgres" else
                             str(root.resolve()).encode()).hexdigest()[:12]
        self.dir = Path("/var/lib/postgresql") / f"ballast-{key}" if os.geteuid() == 0 else root / name
        self.pidfile = root / f"{name}.pid"
        self.logfile = root / "logs" / f"{name}.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://ballast@{HOST}:{self.port}/ballast"

    def alive(self) -> bool:
        return pid_alive(self.pidfile) is not None

    def up(self) -> None:
        if self.alive() and port_open(self.port):
            log(f"{self.name}: already running on {HOST}:{self.port}")
            return
        if not _pg_bin("initdb"):
            log("postgres: not installed; installing Debian's postgresql")
            res = apt_install(["postgresql"])
            if res.returncode != 0 or not _pg_bin("initdb"):
                raise StackError(f"could not install postgresql: {res.stderr[-500:]}")
        self._check_port()
        run_as: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            subprocess.run(["id", "postgres"], check=False, capture_output=True).returncode == 0 or subprocess.run(
                ["useradd", "--system", "--no-create-home", "postgres"], check=True
            )
            run_as = ["runuser", "-u", "postgres", "--"]
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        if run_as:
            subprocess.run(["chown", "-R", "postgres", str(self.dir)], check=True)
        data = self.dir / "data"
        if not (data / "PG_VERSION").exists():
            subprocess.run(run_as + [_pg_bin("initdb"), "-D", str(data), "-U", "ballast", "--auth=trust", "-E", "UTF8"],
                           check=True, capture_output=True)
        self.logfile.parent.mkdir(parents=True, exist_ok=True)
        if run_as:
            self.logfile.touch()
            subprocess.run(["chown", "postgres", str(self.logfile)], check=True)
        cmd = run_as + [_pg_bin("postgres"), "-D", str(data), "-p", str(self.port), "-h", HOST, "-k", str(self.dir)]
        for attempt in range(3):
            spawn(cmd, self.logfile, self.pidfile)
            try:
                wait_healthy(lambda: port_open(self.port), "PostgreSQL", 60, self.logfile, self.pidfile)
                break
            except StackError as exc:
                # a client socket took the port between the check and postgres' bind: wait, try again
                if attempt == 2 or "Address already in use" not in str(exc):
                    raise
                log(f"{self.name}: port {self.port} was taken during start-up; trying again")
                time.sleep(2.0)
                self._check_port()
        time.sleep(1.0)
        createdb = _pg_bin("createdb")
        res = subprocess.run([createdb, "-h", HOST, "-p", str(self.port), "-U", "ballast", "ballast"],
                             capture_output=True, text=True)
        if res.returncode != 0 and "already exists" not in res.stderr:
            raise StackError(f"createdb failed: {res.stderr}")
        log(f"{self.name}: healthy at {self.url}")

    def _check_port(self) -> None:
        """A StackError that says what to do when no server could listen on the port now."""
        require_free_port(self.port, "BALLAST_PG_PORT")

    def down(self) -> None:
        """Fast shutdown: SIGINT to the postmaster itself (SIGTERM would wait for every client to
        disconnect, and `runuser` in between turns signals into SIGTERM)."""
        try:
            os.kill(int((self.dir / "data" / "postmaster.pid").read_text().split()[0]), signal.SIGINT)
            deadline = time.time() + 20
            while time.time() < deadline and self.alive():
                time.sleep(0.2)
        except (OSError, ValueError, IndexError):
            pass
        if not self.alive() and self.pidfile.exists():
            self.pidfile.unlink()
            log(f"{self.name}: stopped (fast shutdown)")
            return
        stop(self.name, self.pidfile)

    def clean(self) -> None:
        """After `down`: remove the cluster, which as root lives outside the state dir."""
        if self.dir.exists():
            shutil.rmtree(self.dir)
            log(f"{self.name}: removed {self.dir}")


def default_postgres() -> Postgres:
    return Postgres(STATE, PG_PORT)


PG_PID = STATE / "postgres.pid"


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for cand in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(cand)
    return None


def postgres_url() -> str:
    return default_postgres().url


def postgres_up() -> None:
    """Start the stack's throwaway PostgreSQL cluster (installs Debian's postgresql when absent)."""
    default_postgres().up()


def postgres_down() -> None:
    default_postgres().down()


def postgres_clean() -> None:
    """After `down`: remove the cluster, which as root lives outside `.state/`."""
    default_postgres().clean()
