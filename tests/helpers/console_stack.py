"""A real Airflow for the console tests, started by scripts/stack.py, plus Debian's chromium.

The Airflow is the stack's own (`stack.py up airflow`: standalone, simple auth manager, login
admin / ballast) in a state directory and on ports of its own, so a developer's `make up` on 8080
is never touched. It reads the metrics DB through the `ballast_metrics_db` connection (an
AIRFLOW_CONN_ variable), while its BALLAST_DB_URL points at an empty decoy DB: a console that read
the environment instead of the connection would show nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ballast.emitter import ensure_control_topics
from scripts.stack_procs import apt_install
from tests.helpers.jobs import write_jobs_file
from tests.helpers.procs import free_port

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "scripts" / "stack.py"
ADMIN = ("admin", os.environ.get("BALLAST_AIRFLOW_PASSWORD", "ballast"))

@dataclass
class ConsoleStack:
    base: Path
    port: int
    env: dict[str, str]
    job: str
    bins: int
    db_url: str
    jobs_file: Path

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def token(self) -> str:
        body = json.dumps({"username": ADMIN[0], "password": ADMIN[1]}).encode()
        req = urllib.request.Request(f"{self.root}/auth/token", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return str(json.load(r)["access_token"])

    def get(self, path: str, token: str | None = None, accept: str = "application/json",
            timeout: float = 60.0) -> tuple[int, str]:
        """(status, body); (0, reason) when the api-server did not answer in time (standalone on
        SQLite stalls for tens of seconds under load while a task starts: pollers just retry)."""
        headers = {"Accept": accept}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(f"{self.root}{path}", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")
        except (TimeoutError, urllib.error.URLError) as exc:
            return 0, str(exc)

    def log_tail(self, chars: int = 4000) -> str:
        p = self.base / "state" / "logs" / "airflow.log"
        return p.read_text(errors="replace")[-chars:] if p.exists() else "(no airflow.log)"


def signal_job(job: str) -> str:
    """The stack's second job, whose rebalance DAG an asset watcher on `<job>.signals` starts."""
    return f"{job}-sig"


def start(base: Path, job: str, bins: int, kafka_bootstrap: str, timeout_s: float = 420) -> ConsoleStack:
    """Migrate a metrics DB and a decoy, write the jobs file, start Airflow (returns when healthy)."""
    from migrations_db.db import migrate

    base.mkdir(parents=True, exist_ok=True)
    db_path, decoy = base / "metrics.db", base / "decoy.db"
    migrate(f"sqlite:///{db_path}")
    migrate(f"sqlite:///{decoy}")
    jobs_file = base / "jobs.yaml"
    # the console's job runs no rebalance DAG of its own (no schedule, signals off: the tests plan
    # by hand); a second job, never launched, has its signals watched (tests/system/test_signals_watcher_job.py)
    write_jobs_file(
        jobs_file, job, bins, schedules={"supervise": None, "rebalance": None}, checkpoint_dir=base / "ckpt",
        extra_args=["--trigger-ms", "700", "--max-offsets-per-trigger", "6000"], heartbeat_timeout_s=60, spark_ui=True,
        rebalance={"target_utilization": 0.5, "await_timeout_s": 300, "poll_interval_s": 0.5, "signal_epochs": 0},
    )
    doc = yaml.safe_load(jobs_file.read_text())
    doc["jobs"].append({**doc["jobs"][0], "job": signal_job(job), "input_topic": f"{signal_job(job)}.in",
                        "checkpoint_dir": str(base / "ckpt-signals"),
                        "rebalance": {**doc["jobs"][0]["rebalance"], "signal_epochs": 5}})
    jobs_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    ensure_control_topics(kafka_bootstrap, signal_job(job))  # as the supervisor's launch would
    port = free_port()
    # nothing of the caller's Airflow settings (a test session's throwaway home, unit-test mode) leaks in
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_HOME"))}
    env.update({
        "BALLAST_STATE_DIR": str(base / "state"),
        "BALLAST_AIRFLOW_PORT": str(port),
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(free_port()),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(free_port()),
        "BALLAST_JOBS_FILE": str(jobs_file),
        "BALLAST_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "BALLAST_DB_URL": f"sqlite:///{decoy}",
        "AIRFLOW_CONN_BALLAST_METRICS_DB": json.dumps({"conn_type": "sqlite", "host": str(db_path)}),
    })
    st = ConsoleStack(base, port, env, job, bins, f"sqlite:///{db_path}", jobs_file)
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, str(STACK), "up", "airflow"], env=env, capture_output=True, text=True,
                         timeout=timeout_s, cwd=REPO)
    if res.returncode != 0:
        stop(st)
        raise RuntimeError(f"stack.py up airflow failed ({res.returncode}):\n{res.stdout[-3000:]}\n"
                           f"{res.stderr[-3000:]}\n"
                           f"{st.log_tail()}")
    print(f"[timing] Airflow up on {st.root} in {time.monotonic() - t0:.0f}s", flush=True)
    return st


def stop(st: ConsoleStack) -> None:
    subprocess.run([sys.executable, str(STACK), "down", "airflow"], env=st.env, capture_output=True, text=True,
                   timeout=180, cwd=REPO)


def ensure_chromium() -> tuple[str, str]:
    """Debian's chromium and chromedriver, installed with apt-get when absent (2-3 min, as root)."""
    chrome, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chrome and driver:
        return chrome, driver
    if os.geteuid() != 0:
        raise RuntimeError("chromium/chromedriver are missing and this is not root: "
                           "sudo apt-get install -y chromium chromium-driver")
    t0 = time.monotonic()
    res = apt_install(["chromium", "chromium-driver"])  # one at a time: two workers may need it at once
    chrome, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if res.returncode != 0 or not chrome or not driver:
        raise RuntimeError(f"apt-get install chromium chromium-driver failed:\n{res.stdout[-2000:]}\n"
                           f"{res.stderr[-2000:]}")
    print(f"[timing] installed chromium in {time.monotonic() - t0:.0f}s", flush=True)
    return chrome, driver


def browser(width: int = 1500, height: int = 1100) -> Any:
    """Headless chromium driven by Selenium through Debian's chromedriver (no driver download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chrome, driver = ensure_chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--hide-scrollbars", "--force-device-scale-factor=1"):
        opts.add_argument(arg)
    return webdriver.Chrome(options=opts, service=Service(executable_path=driver))


def screenshot(drv: Any, path: Path, full_page: bool = True) -> Path:
    """A PNG of the page; full_page: the whole document height, not just the viewport."""
    import base64

    path.parent.mkdir(parents=True, exist_ok=True)
    if full_page:
        h = int(drv.execute_script(
            "return Math.max(document.body.scrollHeight, document.documentElement.scrollHeight)"))
        w = int(drv.execute_script("return document.documentElement.clientWidth"))
        shot = drv.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
    else:
        drv.save_screenshot(str(path))
    return path


def page_wait(drv: Any, timeout_s: float) -> Any:
    """A WebDriverWait that retries when the console's refresh redrew what it was reading.

    The console rewrites its panels (innerHTML) on every refresh, so an element found a moment ago
    can be stale by the time its text or attribute is read; that is a retry, not a failure.
    """
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(drv, timeout_s, poll_frequency=0.5, ignored_exceptions=(StaleElementReferenceException,))


def text(drv: Any, css: str) -> str:
    """The innerText of the first element matching css ('' if none), read in one script call so a
    refresh between finding the element and reading it cannot make it stale."""
    return str(drv.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : ''", css))


def links(drv: Any, css: str) -> list[dict[str, str]]:
    """Text and href of every link under css, read in one script call (see text)."""
    return list(drv.execute_script(
        "return [...document.querySelectorAll(arguments[0] + ' a')]"
        ".map(a => ({text: a.innerText, href: a.href}))", css))
