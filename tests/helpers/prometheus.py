"""A real Prometheus server of a test's own (Debian's package): its own config and storage under
tmp, 127.0.0.1 on a free port, stopped by pid. What `scripts/setup.sh` installs; as root this
installs it too when absent, and the test fails with apt's output when it cannot."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.stack_procs import apt_install
from tests.helpers.procs import free_port, stop_group
from tests.helpers.wait import wait_until


def ensure_prometheus() -> str:
    """The `prometheus` binary; installed with apt-get (no service started) when absent and root."""
    found = shutil.which("prometheus")
    if found:
        return found
    if os.geteuid() != 0:
        raise RuntimeError("prometheus is missing and this is not root: sudo apt-get install -y prometheus")
    res = apt_install(["prometheus"], recommends=False, env={"RUNLEVEL": "1"})
    found = shutil.which("prometheus")
    if res.returncode != 0 or not found:
        raise RuntimeError(f"apt-get install prometheus failed:\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    return found


@dataclass
class PromServer:
    """A running Prometheus: its URL and process."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query over the HTTP API (`/api/v1/query`): the result vector."""
        q = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{q}", timeout=10) as resp:
            doc = json.load(resp)
        assert doc["status"] == "success", doc
        return list(doc["data"]["result"])

    def value(self, promql: str) -> float | None:
        """The one sample of an instant query, or None when it returns nothing."""
        res = self.query(promql)
        assert len(res) <= 1, res
        return float(res[0]["value"][1]) if res else None

    def targets_up(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as resp:
            doc = json.load(resp)
        active = doc["data"]["activeTargets"]
        return bool(active) and all(t["health"] == "up" for t in active)

    def stop(self) -> None:
        stop_group(self.proc, grace_s=15)


def start_prometheus(workdir: Path, targets: list[str], scrape_s: int = 1) -> PromServer:
    """Start Prometheus scraping `targets` (host:port) every `scrape_s` seconds; data under `workdir`."""
    binary = ensure_prometheus()
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": f"{scrape_s}s", "evaluation_interval": f"{scrape_s}s"},
        # honor_labels: the job's own `job` label wins over the scrape job's name (else it becomes `exported_job`)
        "scrape_configs": [{"job_name": "ballast", "honor_labels": True, "static_configs": [{"targets": targets}]}],
    }))
    port = free_port()
    log = workdir / "prometheus.log"
    args = [binary, f"--config.file={cfg}", f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
    server = PromServer(url=f"http://127.0.0.1:{port}", proc=proc, log=log)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"prometheus exited {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}/-/ready", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    t0 = time.monotonic()
    wait_until(ready, timeout=60, what="prometheus ready")
    print(f"[prometheus] {server.url} ready in {time.monotonic() - t0:.1f}s (pid {proc.pid})", flush=True)
    return server
