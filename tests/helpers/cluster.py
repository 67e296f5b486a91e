"""Fixtures of the cluster tests: a real Spark standalone cluster on 127.0.0.1 and apps submitted to it.

The cluster (scripts/spark_cluster.py) is started in the test's tmp_path and stopped after it,
whatever the test did; every app submitted through `submit_app` is killed (its process group) at
teardown too, so a failing test leaves no JVM behind.

The fixtures are re-exported by the conftest.py of each directory that uses them (tests/scripts
for the cluster script itself, tests/system for a job on the cluster).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from scripts.spark_cluster import SparkCluster, spark_submit_cmd, start_cluster, submit_env


@pytest.fixture
def spark_cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Master + 2 workers (1 core, 1g each) on 127.0.0.1; stopped (every process, by pid) after the test."""
    t0 = time.monotonic()
    cluster = start_cluster(tmp_path / "cluster", workers=2, cores_per_worker=1, memory_per_worker="1g",
                            start_timeout=120)
    print(f"[timing] cluster start (master + 2 workers ALIVE): {time.monotonic() - t0:.1f}s")
    try:
        yield cluster
    finally:
        cluster.stop()


@dataclass
class App:
    """A spark-submit run in the background: its driver's stdout (JSON lines) and stderr in files."""

    proc: subprocess.Popen
    out: Path
    err: Path

    def records(self) -> list[dict]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return [json.loads(line) for line in lines if line.startswith("{")]

    def tail(self, chars: int = 4000) -> str:
        return "\n".join(p.read_text(errors="replace")[-chars:] for p in (self.out, self.err) if p.exists())

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"app still running after {timeout:.0f}s:\n{self.tail()}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # spark-submit JVM + its Python driver
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


@pytest.fixture
def submit_app(tmp_path: Path):  # type: ignore[no-untyped-def]
    """submit_app(cluster, source, args, conf, jars) writes `source` to tmp_path and runs it on the cluster.

    `jars` defaults to none (these apps do not read Kafka); None means the Kafka connector.
    """
    apps: list[App] = []

    def _submit(cluster: SparkCluster, source: str, args: tuple[str, ...] = (), conf: dict[str, str] | None = None,
                jars: tuple[str, ...] | None = ()) -> App:
        n = len(apps)
        script = tmp_path / f"app{n}.py"
        script.write_text(source)
        out, err = tmp_path / f"app{n}.out", tmp_path / f"app{n}.err"
        cmd = spark_submit_cmd(cluster, str(script), list(args), conf=conf,
                               jars=None if jars is None else list(jars), name=f"cluster-test-{n}")
        with open(out, "wb") as o, open(err, "wb") as e:
            proc = subprocess.Popen(cmd, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=submit_env(),
                                    cwd=tmp_path, start_new_session=True)
        apps.append(App(proc, out, err))
        return apps[-1]

    yield _submit
    for app in apps:
        app.kill()


@dataclass
class JobDriver:
    """A Ballast job submitted to the cluster (spark-submit in its own process group), its output in `log`."""

    proc: subprocess.Popen
    log: Path

    @classmethod
    def start(cls, cmd: list[str], workdir: Path) -> JobDriver:
        """Run `cmd` (spark_submit_cmd's) from `workdir`, Spark's own logging at ERROR, and wait for the
        driver's effective-configuration line."""
        from tests.helpers.wait import wait_until

        log = workdir / "driver.log"
        with open(log, "wb") as f:
            proc = subprocess.Popen(cmd, cwd=workdir, env={**submit_env(), "BALLAST_SPARK_LOG_LEVEL": "ERROR"},
                                    stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        driver = cls(proc, log)
        wait_until(lambda: b"effective configuration" in log.read_bytes(), 240, "the driver up", check=driver.alive)
        return driver

    def alive(self) -> None:
        """Raises with the log's tail once the driver has exited (a wait's `check`)."""
        assert self.proc.poll() is None, self.log.read_text(errors="replace")[-4000:]
