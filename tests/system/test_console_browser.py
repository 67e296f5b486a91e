"""The console in a real browser (Debian's chromium, headless) while a real job migrates.

A key-count Spark job is launched by the supervisor (as ballast_supervise does) against the metrics
DB the stack's Airflow reads through its connection; a person logs in to Airflow, opens the
console from the nav, and watches a 1 -> 2 worker migration: the job row, the bin map heat map
(B cells), the plan timeline whose steps turn applied, the trigger form prefilled for a dry run.
Screenshots land in the test's tmp dir (and in $BALLAST_UI_SHOTS when set, e.g. docs/img).
A handover is shown from a seeded decision log (no job runs for it: the data plane's side of a
handover is tests/system/test_handover_job.py).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sys
import threading
import time
import urllib.request
from pathlib import Path
from urllib.parse import quote

import pytest
from kafka import KafkaProducer

from ballast import controller, store, supervisor
from ballast.config import load_jobs
from tests.helpers import console_stack as cs
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.ui, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def _load(stop: threading.Event, bootstrap: str, topic: str, rate: float) -> None:
    """Open-loop Zipf-skewed keys, so the heat map has hot bins."""
    rng = random.Random(11)
    keys = 5000
    weights = [1.0 / (i + 1) ** 1.2 for i in range(keys)]
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=50)
    start, sent = time.time(), 0
    while not stop.is_set():
        due = int((time.time() - start) * rate)
        for k in rng.choices(range(keys), weights, k=max(0, due - sent)):
            p.send(topic, key=f"user-{k}".encode(), value=b"1")
        sent = max(sent, due)
        time.sleep(0.1)
    p.flush()
    p.close()


@pytest.fixture(scope="module")
def live_job(console_stack, kafka_bootstrap):  # type: ignore[no-untyped-def]
    st = console_stack
    mp = pytest.MonkeyPatch()
    mp.setenv("BALLAST_JOBS_FILE", str(st.jobs_file))
    mp.setenv("BALLAST_DB_URL", st.db_url)
    mp.setenv("BALLAST_KAFKA_BOOTSTRAP", kafka_bootstrap)
    mp.setenv("BALLAST_STATE_DIR", str(st.base / "jobs"))
    sys.modules["ballast_stack"].ensure_topics({f"{st.job}.in": 2}, kafka_bootstrap)
    cfg = load_jobs()[st.job]
    t0 = time.monotonic()
    supervisor.launch(cfg, kafka_bootstrap, st.db_url, reason="ui test")
    stop = threading.Event()
    gen = threading.Thread(target=_load, args=(stop, kafka_bootstrap, f"{st.job}.in", 1500.0), daemon=True)
    gen.start()
    try:
        wait_until(lambda: len(store.epoch_window(st.db_url, st.job, "keycount", 12)) >= 12, 300,
                   "12 epochs of the job")
        print(f"[timing] job up with 12 epochs in {time.monotonic() - t0:.0f}s", flush=True)
        yield cfg
    finally:
        stop.set()
        gen.join(timeout=30)
        supervisor.stop(cfg, timeout_s=60)
        mp.undo()


def _login(drv, st) -> None:  # type: ignore[no-untyped-def]
    """Airflow's own login form, as a person would."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    drv.get(f"{st.root}/ballast/")  # no session: the console says so and links to the login page
    assert "Log in" in drv.page_source
    drv.get(f"{st.root}/auth/login?next={st.root}/")
    w = WebDriverWait(drv, 90)
    w.until(lambda d: d.find_elements(By.NAME, "username"))
    drv.find_element(By.NAME, "username").send_keys(cs.ADMIN[0])
    drv.find_element(By.NAME, "password").send_keys(cs.ADMIN[1])
    w.until(lambda d: d.find_element(By.CSS_SELECTOR, "button[type=submit]").is_enabled())
    drv.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    w.until(lambda d: "/auth/login" not in d.current_url and d.get_cookie("_token"))


def _js(drv, script: str):  # type: ignore[no-untyped-def]
    return drv.execute_script(script)


def _plan_state(drv) -> dict:  # type: ignore[no-untyped-def]
    return _js(drv, """
      const head = document.querySelector('#plan-detail .plan-head');
      const rows = [...document.querySelectorAll('#plan-steps tr[data-step]')].map(r => r.dataset.status);
      const bars = (document.getElementById('plan-timeline').data || [])[0];
      return {plan: head ? head.dataset.plan : null, status: head ? head.dataset.status : null, steps: rows,
              bars: bars ? bars.y.length : 0};""")


def test_console_shows_a_live_migration(console_stack, live_job, browser, tmp_path, kafka_bootstrap):
    from selenium.webdriver.common.by import By

    st, cfg, drv = console_stack, live_job, browser
    shots = tmp_path / "screenshots"
    url, job, bins = st.db_url, st.job, st.bins
    wait = cs.page_wait(drv, 120)
    _login(drv, st)

    # the nav entry: Airflow's UI shows the console in its own frame
    drv.get(f"{st.root}/plugin/ballast")
    frame = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "iframe[src*='/ballast/']"))[0]
    drv.switch_to.frame(frame)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f"#jobs tr[data-job='{job}']"))
    drv.switch_to.default_content()
    time.sleep(3)  # let the frame's charts draw
    cs.screenshot(drv, shots / "console-in-airflow.png", full_page=False)

    drv.get_log("browser")  # what Airflow's own pages logged is not the console's business
    drv.get(f"{st.root}/ballast/?job={job}")
    # the job row: running, with its heartbeat's facts
    wait.until(lambda d: cs.text(d, f"#jobs tr[data-job='{job}'] [data-field=status]") == "running")
    row = cs.text(drv, f"#jobs tr[data-job='{job}']")
    assert job in row and "keycount" in row
    # the settings in force: the job's command line (--trigger-ms 700 --max-offsets-per-trigger 6000)
    facts = wait.until(lambda d: cs.text(d, "#job-facts"))
    assert "700 ms · 6,000" in facts, facts
    # where else to look: the driver's Spark UI (on loopback, answering), the job's DAG runs, its topics
    spark_ui = wait.until(lambda d: [a["href"] for a in cs.links(d, "#job-links")
                                     if a["text"].startswith("Spark UI")])[0]
    assert spark_ui.startswith("http://127.0.0.1:"), spark_ui
    with urllib.request.urlopen(spark_ui, timeout=30) as r:
        assert r.status == 200 and "Spark" in r.read().decode(errors="replace")
    hrefs = [a["href"] for a in cs.links(drv, "#job-links")]
    assert any(h.endswith(f"/dags/ballast_rebalance__{job}/runs") for h in hrefs), hrefs
    topics = cs.text(drv, "#job-links")
    assert f"reads {job}.in" in topics and f"{job}.output" in topics and f"{job}.signals" in topics, topics
    # the bin map: B cells, each bin on exactly one of the W rows
    wait.until(lambda d: d.find_element(By.ID, "heatmap").get_attribute("data-bins") == str(bins))
    cells = _js(drv, "return document.getElementById('heatmap').data[0].z.map(r => r.filter(v => v !== null).length)")
    assert sum(cells) == bins and len(cells) == 1, cells
    # the series come in a fetch of their own, which can land after the bin map's (CI: data[0] undefined)
    rate_points = "const c = document.getElementById('chart-rate').data; return c && c.length ? c[0].x.length : 0"
    wait.until(lambda d: _js(d, rate_points) > 0)
    # what holds epochs back: the stored traces' critical path as one sentence, CP per epoch, and the
    # newest epoch's timeline with at least one activity on its critical path
    wait.until(lambda d: "of the critical path" in cs.text(d, "#bottleneck"))
    assert _js(drv, "return document.getElementById('chart-critical').data[0].x.length") >= 1
    assert _js(drv, "return document.getElementById('chart-timeline').data[1].x.length") >= 1
    drv.execute_script("document.getElementById('critical-section').scrollIntoView(); window.scrollBy(0, -70)")
    time.sleep(1.0)
    cs.screenshot(drv, shots / "console-critical-path.png", full_page=False)
    drv.execute_script("window.scrollTo(0, 0)")

    # a DS2 decision on the running job, as ballast_rebalance's evaluate step stores it
    controller.evaluate(url, cfg, controller.collect(url, cfg))
    token = st.token()
    # the migration: a manual plan (1 -> 2 workers, one bin per step, 3 s apart) emitted step by step
    plan_id = controller.plan_manual(url, cfg, {"target_workers": 2, "strategy": "fluid", "gap_seconds": 3.0,
                                                "dry_run": False, "reason": "ui test: scale out"})["plan_id"]
    n = len(store.plan_steps(url, plan_id))
    assert n >= 2, "the placement moved a single bin: nothing to watch"
    # stored, nothing sent yet: the console shows the plan with every step pending
    wait_until(lambda: _plan_state(drv)["plan"] == plan_id and _plan_state(drv)["steps"] == ["pending"] * n, 60,
          f"plan {plan_id} shown with {n} pending steps")
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(
        controller.run_plan_blocking(url, kafka_bootstrap, plan_id, timeout_s=300)), daemon=True)
    t0 = time.monotonic()
    runner.start()
    seen: list[list[str]] = []

    def steps_now() -> list[str]:
        s = _plan_state(drv)
        steps = s["steps"] if s["plan"] == plan_id else []
        if steps and (not seen or seen[-1] != steps):
            seen.append(steps)
        return steps

    # a screenshot while the plan is half applied (or at least one step is), then wait for the rest
    shot_at, deadline = None, time.time() + 300
    while (k := steps_now().count("applied")) < n:
        if 0 < k and (shot_at is None or shot_at < n // 2 <= k):
            time.sleep(1.0)  # the bin map's next refresh
            cs.screenshot(drv, shots / "console-migration.png")
            shot_at = k
        assert time.time() < deadline, f"plan {plan_id} not applied in 300 s; states seen: {seen}"
        time.sleep(0.3)
    assert shot_at is not None, f"never saw plan {plan_id} partly applied: {seen}"
    runner.join(timeout=120)
    print(f"[timing] plan of {n} steps applied in {time.monotonic() - t0:.0f}s; states seen: {seen}", flush=True)
    # the page followed the plan step by step: applied steps only ever grew, from none to all
    applied = [s.count("applied") for s in seen]
    assert applied == sorted(applied) and applied[0] < n - 1 and len(set(applied)) >= 3, seen
    assert result.get("workers") == 2, result
    # the timeline drew every step; the bin map shows the new map on 2 workers, still B cells
    wait.until(lambda d: _plan_state(d)["status"] == "completed")
    assert _plan_state(drv)["bars"] == n
    # like with like: the pauses of the applied steps, and the plan's duration, each predicted vs
    # measured; the cost model's record over recent plans above the plan list
    head = cs.text(drv, "#plan-detail .plan-head")
    assert "pause (applied steps) predicted" in head and "duration predicted" in head, head
    dur = re.search(r"duration predicted (\S+)( s| ms)? · measured (\S+)", head)
    assert dur and "–" not in (dur.group(1), dur.group(3)) and "so far" not in head, head
    wait.until(lambda d: "pause: measured ÷ predicted median" in cs.text(d, "#plan-accuracy"))
    accuracy = cs.text(drv, "#plan-accuracy")
    assert "duration: measured ÷ predicted median" in accuracy, accuracy
    wait.until(lambda d: d.find_element(By.ID, "heatmap").get_attribute("data-workers") == "2")
    cells = _js(drv, "return document.getElementById('heatmap').data[0].z.map(r => r.filter(v => v !== null).length)")
    assert sum(cells) == bins and len(cells) == 2 and all(cells), cells
    # the DS2 decision and the plan's events are listed
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#decisions td .badge"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#events tr[data-kind=plan_completed]"))
    drv.execute_script("window.scrollTo(0, 0)")
    cs.screenshot(drv, shots / "console-after.png")
    # the trigger form, opened from the console: job prefilled, dry run on, one worker fewer at the
    # job's upper bound (2); Airflow's API accepts the run as the logged-in user
    wait_until(lambda: st.get("/api/v2/dags/ballast_migrate", token=token)[0] == 200, 120,
               "Airflow to parse ballast_migrate")
    drv.find_element(By.ID, "plan-btn").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#trigger-form .field[data-param=dry_run]"))
    assert drv.find_element(By.CSS_SELECTOR, "#trigger-form [name=job]").get_attribute("value") == job
    assert drv.find_element(By.CSS_SELECTOR, "#trigger-form [name=dry_run]").is_selected()
    assert drv.find_element(By.CSS_SELECTOR, "#trigger-form [name=target_workers]").get_attribute("value") == "1"
    cs.screenshot(drv, shots / "console-trigger-form.png", full_page=False)
    drv.find_element(By.ID, "trigger-go").click()
    link = wait.until(lambda d: d.find_elements(By.CSS_SELECTOR,
                                                "#trigger-result a[href*='/dags/ballast_migrate/runs/']"))
    assert "dry run" in drv.find_element(By.ID, "trigger-result").text
    assert link[0].get_attribute("target") == "_top"
    run_id = link[0].text.strip(" ↗")
    code, body = st.get(f"/api/v2/dags/ballast_migrate/dagRuns/{quote(run_id, safe='')}", token=token)
    assert code == 200, body[:500]
    conf = json.loads(body)["conf"]
    assert (conf["job"], conf["dry_run"], conf["target_workers"]) == (job, True, 1), conf
    drv.find_element(By.CSS_SELECTOR, "#trigger-form button[value=cancel]").click()
    errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert not errors, errors

    out = os.environ.get("BALLAST_UI_SHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        for name in ("console-in-airflow.png", "console-migration.png", "console-after.png",
                     "console-trigger-form.png", "console-critical-path.png"):
            shutil.copy(shots / name, Path(out) / name)


def test_console_shows_a_waiting_handover_then_its_0_bytes(console_stack, browser, tmp_path):
    """A handover sent by hand to a job (its decision log and heartbeat seeded in the metrics DB the
    stack's Airflow reads): the console says it in one sentence with UTC event times, lists both
    owners of the bins and charts the watermark against the boundary, follows the watermark epoch by
    epoch, and once applied says that it moved 0 bytes."""
    from datetime import UTC, datetime

    from ballast.store import writer
    from tests.helpers.jobs import seed_job
    from tests.helpers.store_seed import NOON_MS, handover_applied, log_waiting_handover

    st, drv = console_stack, browser
    job, op, shots = f"{st.job}-ho", "keycount", tmp_path / "screenshots"
    seed_job(st.db_url, job, bins=16, workers=2, epochs=6)
    with writer.epoch_transaction(st.db_url) as s:
        writer.heartbeat(s, job, op, epoch=8, map_version=0, workers=2, now=datetime.now(UTC),
                         started_at=datetime.now(UTC), status="running")
    log_waiting_handover(st.db_url, "by-hand", 1, [7, 8], [None, NOON_MS + 8_000], job=job, operator=op)
    wait = cs.page_wait(drv, 60)
    _login(drv, st)
    drv.get_log("browser")  # what Airflow's own pages logged is not the console's business
    drv.get(f"{st.root}/ballast/?job={job}")

    def said(d, what: str = "[data-field=handover]") -> str:  # type: ignore[no-untyped-def]
        """A part of the handover panel's text, read in one go (each refresh redraws the panel)."""
        return str(_js(d, "const box = document.getElementById('handover'), e = box && box.querySelector("
                          f"'{what}'); return e && !box.hidden ? e.innerText : ''"))

    wait.until(lambda d: "2 windows left" in said(d))
    assert said(drv) == ("handover of 4 bins 0→1: the old owner finishes the windows up to 12:00:15.000; "
                         "2 windows left; watermark 12:00:08.000 (event time, UTC)")
    bins = said(drv, "#handover-bins")
    assert "3, 5, 9, 12\tw0\tw1" in bins, bins
    times = said(drv, "#handover-times")
    assert "boundary\t12:00:15.000" in times and "activation\t12:00:10.000" in times, times
    # the next epoch's watermark reaches the page at its next refresh (every 3 s)
    log_waiting_handover(st.db_url, "by-hand", 1, [7, 8, 9], [None, NOON_MS + 8_000, NOON_MS + 13_200], job=job,
                         operator=op)
    wait.until(lambda d: "1 window left; watermark 12:00:13.200" in said(d))
    assert _js(drv, "return document.getElementById('handover-chart').data[3].x.length") == 3
    drv.execute_script("document.getElementById('plan-section').scrollIntoView(); window.scrollBy(0, -70)")
    time.sleep(1.0)
    cs.screenshot(drv, shots / "console-handover.png", full_page=False)

    handover_applied(st.db_url, "by-hand", 1, 10, job=job, operator=op)
    wait.until(lambda d: "0 bytes of state moved by handover" in said(d))
    assert _js(drv, "return document.getElementById('handover').dataset.status") == "applied"
    assert "state moved\t0 B (by handover)" in said(drv, "#handover-times")
    time.sleep(1.0)
    cs.screenshot(drv, shots / "console-handover-applied.png", full_page=False)
    errors = [e for e in drv.get_log("browser") if e["level"] == "SEVERE" and "favicon" not in e["message"]]
    assert not errors, errors
    out = os.environ.get("BALLAST_UI_SHOTS")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(shots / "console-handover.png", Path(out) / "console-handover.png")
