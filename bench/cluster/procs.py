"""Processes of the cluster experiment: children with their own environment, killed by group;
the loopback standalone cluster script loaded as a module; the durable snapshots a job takes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from bench.ballast_job import OffsetLogTail
from bench.infra import REPO, Proc


class EnvProc(Proc):
    """bench.infra.Proc with its own environment and working directory (the old checkout's job
    must not see this checkout: `python -m` puts the working directory first on sys.path, in the
    driver and in Spark's Python workers)."""

    def __init__(self, args: list[str], log: Path, name: str, env: dict[str, str], cwd: Path) -> None:
        super().__init__(args, log, name)
        self.env, self.cwd = env, cwd

    def start(self) -> EnvProc:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as fh:
            self.p = subprocess.Popen(self.args, stdout=fh, stderr=subprocess.STDOUT, env=self.env, cwd=str(self.cwd),
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        return self


def kill_group(proc: Proc) -> None:
    """SIGKILL the process group of a child started in its own session (spark-submit's JVM and the
    Python driver it launched), whether or not its leader has exited."""
    if proc.p is None:
        return
    try:
        os.killpg(proc.p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def topic_rows(bootstrap: str, topic: str) -> int:
    from bench.loadgen import end_offsets

    return sum(end_offsets(bootstrap, topic, 2))


def spark_cluster_module():  # type: ignore[no-untyped-def]
    """scripts/spark_cluster.py as a module (a script directory, not a package)."""
    name = "ballast_spark_cluster"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "spark_cluster.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


class SnapshotTail(OffsetLogTail):
    """Which epochs took a state snapshot (every `--snapshot-every` epochs each worker writes its
    whole state): read from the durable manifests while the job runs, since retention deletes them.
    The polling thread is bench.ballast_job.OffsetLogTail's."""

    def __init__(self, state_dir: Path, interval_s: float = 0.5) -> None:
        super().__init__(Path(state_dir), "", interval_s)
        self.dir = Path(state_dir) / "manifest"
        self.snapshots: set[int] = set()
        self.seen: set[str] = set()

    def _scan(self) -> None:
        try:
            names = [n for n in os.listdir(self.dir) if n.endswith(".json") and n not in self.seen]
        except FileNotFoundError:
            return
        for n in names:
            try:
                doc = json.loads((self.dir / n).read_text())
            except (OSError, ValueError):
                continue  # deleted by retention meanwhile, or being replaced: the next scan decides
            self.seen.add(n)
            if doc.get("snapshot"):
                self.snapshots.add(int(doc["epoch"]))

    def stop(self) -> set[int]:  # type: ignore[override]
        super().stop()
        return self.snapshots
