"""A Spark standalone cluster on 127.0.0.1 that tests and benchmarks start and stop themselves.

    from spark_cluster import start_cluster, spark_submit_cmd
    with start_cluster(tmp_path, workers=2) as cluster:          # master + 2 workers, all ALIVE
        subprocess.run(spark_submit_cmd(cluster, "app.py", []), env=submit_env(), check=True)
        cluster.executors()                                      # executor JVMs, found by pid
        cluster.kill_executor("0")                               # SIGKILL; the master relaunches it
        cluster.add_worker()                                     # grow by one worker

`python scripts/spark_cluster_cli.py up|down|status --dir D [--workers N]` does the same for people
(`up` leaves the cluster running and records it in D/cluster.json; `down` stops it).
Its processes are found through /proc in spark_cluster_procs; the spark-submit line is built in
spark_cluster_submit; both modules' public names are re-exported here.

SPARK_HOME is the pyspark wheel's directory: it has `bin/spark-class` but no `sbin/start-*.sh`,
so the master and every worker are started here with `spark-class`. Every port is chosen free at
start (no fixed port), every process binds to 127.0.0.1, and each worker has its own work and
local dirs under the base dir, so no executor sees another worker's files. Each started process
gets its own process group and log file; every process of the cluster (executors and their Python
workers included) carries the environment variable BALLAST_SPARK_CLUSTER=<token>, which is how
`stop()` finds stragglers: by pid, never by name. Linux only (reads /proc).

Measured on a loaded 2-core machine (Spark 4.2): master + 2 workers ALIVE in 10-30 s; a SIGKILLed
executor's replacement process is up within a second, its first task runs 5-20 s later. What
standalone does with executor requests and kills: docs/operations.md, "Traps we verified".
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
import weakref
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

if str(Path(__file__).resolve().parent) not in sys.path:  # the modules beside this file,
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # however this file is loaded

from spark_cluster_procs import (  # noqa: E402
    HOST,
    TAG_VAR,
    all_pids,
    arg,
    cmdline,
    descendants,
    free_port,
    has_tag,
    pid_alive,
    signal_group,
    tail,
    wait_until,
)
from spark_cluster_submit import spark_home, spark_submit_cmd, submit_env  # noqa: E402

from ballast.errors import BallastError  # noqa: E402
from ballast.options import settings  # noqa: E402

__all__ = ["HOST", "TAG_VAR", "ClusterError", "Executor", "SparkCluster", "Worker", "free_port", "pid_alive",
           "spark_home", "spark_submit_cmd", "start_cluster", "submit_env", "wait_until"]
EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"
STATE_FILE = "cluster.json"


class ClusterError(BallastError, RuntimeError):
    """The cluster (or one of its processes) did not come up; the message has the log tail."""


# ------------------------------------------------------------------------------- the cluster --
@dataclass
class Worker:
    index: int
    pid: int
    ui_port: int
    dir: str
    work_dir: str
    local_dir: str
    log: str
    worker_id: str | None = None  # the master's id for it, once registered

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"


@dataclass
class Executor:
    pid: int
    worker_index: int
    executor_id: str
    app_id: str


@dataclass
class SparkCluster:
    base_dir: Path
    cores_per_worker: int = 1
    memory_per_worker: str = "1g"
    start_timeout: float = 120.0
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    port: int = 0
    ui_port: int = 0
    master_pid: int = 0
    workers: list[Worker] = field(default_factory=list)
    _procs: dict[int, subprocess.Popen] = field(default_factory=dict, repr=False)
    _stopped: bool = False

    # ------------------------------------------------------------------------- addresses --
    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{HOST}:{self.ui_port}"

    @property
    def master_log(self) -> Path:
        return self.base_dir / "master.log"

    # ------------------------------------------------------------------------- processes --
    def _env(self, **extra: str) -> dict[str, str]:
        env = os.environ.copy()
        for var in ("SPARK_CONF_DIR", "SPARK_MASTER_OPTS", "SPARK_WORKER_OPTS", "SPARK_LOCAL_DIRS"):
            env.pop(var, None)
        conf_dir = self.base_dir / "conf"  # empty: no stray spark-env.sh / spark-defaults.conf
        conf_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            SPARK_HOME=spark_home(),
            SPARK_CONF_DIR=str(conf_dir),
            SPARK_LOCAL_IP=HOST,
            SPARK_LOCAL_HOSTNAME=HOST,
            SPARK_PUBLIC_DNS=HOST,
            SPARK_MASTER_HOST=HOST,
            SPARK_DAEMON_MEMORY=settings().spark_daemon_memory,
            PYSPARK_PYTHON=sys.executable,
            **{TAG_VAR: self.token},
        )
        env.update(extra)
        return env

    def _spawn(self, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.base_dir, start_new_session=True,
            )
        self._procs[proc.pid] = proc
        return proc

    def _wait_up(self, pid: int, log: Path, check: Callable[[], Any], what: str) -> Any:
        """Wait for `check`; ClusterError with the log tail if the process dies or time runs out."""
        def _check() -> Any:
            if not pid_alive(pid):
                raise ClusterError(f"{what} exited during start-up; last lines of {log}:\n{tail(log)}")
            return check()

        try:
            return wait_until(_check, self.start_timeout, what, interval=0.3)
        except TimeoutError:
            raise ClusterError(
                f"{what} not up within {self.start_timeout:.0f}s; last lines of {log}:\n{tail(log)}"
            ) from None

    def _start_master(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.port, self.ui_port = free_port(), free_port()
        # maxRetries=0: a port taken between free_port() and the bind fails loudly (and is
        # retried by the caller) instead of Spark silently moving to port+1 behind our back
        # no REST submission server: it would listen on the fixed port 6066
        env = self._env(SPARK_MASTER_OPTS="-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false")
        proc = self._spawn(
            ["org.apache.spark.deploy.master.Master", "--host", HOST,
             "--port", str(self.port), "--webui-port", str(self.ui_port)],
            self.master_log, env,
        )
        self.master_pid = proc.pid
        self._wait_up(proc.pid, self.master_log, lambda: self._try_status() is not None, "Spark master")

    def _start_worker(self) -> Worker:
        i = len(self.workers)
        wdir = self.base_dir / f"worker-{i}"
        work, local = wdir / "work", wdir / "local"
        work.mkdir(parents=True, exist_ok=True)
        local.mkdir(parents=True, exist_ok=True)
        ui_port = free_port()
        env = self._env(
            SPARK_LOCAL_DIRS=str(local), SPARK_WORKER_DIR=str(work),
            SPARK_WORKER_OPTS="-Dspark.port.maxRetries=0",
        )
        log = wdir / "worker.log"
        proc = self._spawn(
            ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", HOST,
             "--cores", str(self.cores_per_worker), "--memory", self.memory_per_worker,
             "--work-dir", str(work), "--webui-port", str(ui_port)],
            log, env,
        )
        worker = Worker(i, proc.pid, ui_port, str(wdir), str(work), str(local), str(log))
        self.workers.append(worker)
        return worker

    def _registered(self, worker: Worker) -> str | None:
        """The master's id for `worker` once the master lists it ALIVE."""
        for w in (self._try_status() or {}).get("workers", []):
            if w.get("state") == "ALIVE" and w.get("webuiaddress", "").endswith(f":{worker.ui_port}"):
                return w["id"]
        return None

    def _wait_workers(self, workers: Iterable[Worker]) -> None:
        for w in workers:
            w.worker_id = self._wait_up(
                w.pid, Path(w.log), lambda w=w: self._registered(w), f"Spark worker {w.index}"
            )

    def start(self, workers: int = 2) -> SparkCluster:
        for attempt in range(3):  # only a lost port race makes a second attempt worth it
            try:
                self._start_master()
                self._wait_workers([self._start_worker() for _ in range(workers)])
                return self
            except ClusterError as exc:
                self.stop()
                if "BindException" not in str(exc) or attempt == 2:
                    raise
                self._stopped, self.workers = False, []
        return self

    def add_worker(self) -> Worker:
        """Start one more worker (same cores and memory) and wait until the master lists it ALIVE."""
        worker = self._start_worker()
        self._wait_workers([worker])
        return worker

    # ---------------------------------------------------------------------------- reading --
    def _try_status(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=3) as resp:
                return json.load(resp)
        except (OSError, ValueError):
            return None

    def status(self) -> dict:
        """The master's JSON (workers, cores, activeapps, completedapps...)."""
        st = self._try_status()
        if st is None:
            raise ClusterError(f"Spark master at {self.ui_url} does not answer; see {self.master_log}")
        return st

    def alive_cores(self) -> int:
        return sum(w["cores"] for w in self.status()["workers"] if w["state"] == "ALIVE")

    def capacity(self) -> dict[str, int]:
        """Alive workers, their cores and memory (MB), and how many cores apps use now."""
        alive = [w for w in self.status()["workers"] if w["state"] == "ALIVE"]
        return {
            "workers": len(alive),
            "cores": sum(w["cores"] for w in alive),
            "cores_used": sum(w["coresused"] for w in alive),
            "memory_mb": sum(w["memory"] for w in alive),
        }

    def executors(self, app_id: str | None = None) -> list[Executor]:
        """Running executor JVMs: child processes of our workers, newest executor id last."""
        out = []
        for w in self.workers:
            if not pid_alive(w.pid):
                continue
            for pid in descendants(w.pid):
                cmd = cmdline(pid)
                if not any(EXECUTOR_CLASS in a for a in cmd) or not pid_alive(pid):
                    continue
                ex = Executor(pid, w.index, arg(cmd, "--executor-id") or "?", arg(cmd, "--app-id") or "?")
                if app_id is None or ex.app_id == app_id:
                    out.append(ex)
        return sorted(out, key=lambda e: (e.app_id, int(e.executor_id) if e.executor_id.isdigit() else -1))

    def kill_executor(self, target: int | str, sig: int = signal.SIGKILL, app_id: str | None = None) -> Executor:
        """Signal one executor JVM. `target`: its pid (int) or its executor id (str, e.g. "0")."""
        running = self.executors(app_id)
        match = [e for e in running if e.pid == target] if isinstance(target, int) else []
        match = match or [e for e in running if e.executor_id == str(target)]
        if len(match) != 1:
            raise ClusterError(f"no single running executor matches {target!r}: {running}")
        os.kill(match[0].pid, sig)
        return match[0]

    def processes(self) -> list[int]:
        """Every live process of this cluster: started ones, their descendants, tagged stragglers."""
        pids = set()
        for pid in [self.master_pid, *(w.pid for w in self.workers)]:
            if pid and pid_alive(pid):
                pids.add(pid)
                pids.update(p for p in descendants(pid) if pid_alive(p))
        pids.update(p for p in all_pids() if p != os.getpid() and has_tag(p, self.token) and pid_alive(p))
        return sorted(pids)

    # ------------------------------------------------------------------------------ stop --
    def _reap(self) -> None:
        for pid, proc in list(self._procs.items()):
            if proc.poll() is not None:
                del self._procs[pid]

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every process of the cluster (workers, their executors, master); safe to repeat."""
        if self._stopped:
            return
        leaders = [w.pid for w in self.workers] + ([self.master_pid] if self.master_pid else [])
        leaders = [p for p in leaders if p in self._procs or has_tag(p, self.token)]
        everything = set(self.processes())
        for pid in leaders:  # workers first: their shutdown hook stops their executors
            signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._reap()
            if not any(pid_alive(p) for p in everything | set(leaders)):
                break
            time.sleep(0.2)
        for pid in leaders:
            signal_group(pid, signal.SIGKILL)
        for pid in everything | set(self.processes()):  # e.g. PySpark daemons (own group)
            if pid_alive(pid) and (pid in self._procs or has_tag(pid, self.token)):
                os.kill(pid, signal.SIGKILL)
        for proc in self._procs.values():
            proc.wait(timeout=10)
        self._procs.clear()
        wait_until(lambda: not any(pid_alive(p) for p in everything), 10, "cluster processes gone")
        self._stopped = True

    def __enter__(self) -> SparkCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------- CLI state file --
    def save(self) -> Path:
        path = self.base_dir / STATE_FILE
        state = {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}
        state.update(base_dir=str(self.base_dir), workers=[asdict(w) for w in self.workers])
        path.write_text(json.dumps(state, indent=2))
        return path

    @classmethod
    def load(cls, base_dir: Path) -> SparkCluster:
        state = json.loads((Path(base_dir) / STATE_FILE).read_text())
        state["base_dir"] = Path(state["base_dir"])
        state["workers"] = [Worker(**w) for w in state["workers"]]
        return cls(**state)


def start_cluster(
    base_dir: Path,
    workers: int = 2,
    cores_per_worker: int = 1,
    memory_per_worker: str = "1g",
    *,
    start_timeout: float = 120.0,
    stop_at_exit: bool = True,
) -> SparkCluster:
    """Start a master and `workers` workers on 127.0.0.1; return once the master lists all ALIVE."""
    cluster = SparkCluster(Path(base_dir).resolve(), cores_per_worker, memory_per_worker, start_timeout)
    if stop_at_exit:  # a test that dies half-way still leaves no JVM behind
        ref = weakref.ref(cluster)
        atexit.register(lambda: ref() is not None and ref().stop())  # type: ignore[union-attr]
    return cluster.start(workers)
