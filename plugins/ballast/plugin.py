"""AirflowPlugin `ballast`: the console, a FastAPI app mounted by the api-server at /ballast.

* Server-side page `/ballast/` (jobs table, job header) that static/console.js brings to life with
  Plotly charts (plotly.js served from the installed `plotly` package: no CDN), polling the JSON
  API under `/ballast/api/` — every 2 s while a plan runs.
* Linked from the Airflow nav (`external_views`), where the UI shows it in a frame under its menu.
* Behind Airflow's auth manager: Airflow does not authenticate plugin apps (a mount inherits none of
  the core API's dependencies), so every route of this app depends on Airflow's own
  `requires_access_dag("GET", RUN, "ballast_migrate")`: the caller must be logged in (the UI's
  `_token` cookie, or a bearer token) and allowed to read that DAG's runs. Anonymous -> 401.
* Reads the metrics DB through the `ballast_metrics_db` connection the tasks use (hooks.py).
"""

from __future__ import annotations

import html
import json
import logging
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.core_api.security import requires_access_dag
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import HTTPException as FastAPIHTTPException
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, Response

from ballast import console, console_plans, console_trace, dag_ids, dag_run_links, store
from ballast.links import ConsolePlanLink

log = logging.getLogger(__name__)

MIGRATE_DAG = dag_ids.MIGRATE  # the trigger form the console opens; reading its runs = seeing the console
STATIC = Path(__file__).resolve().parent / "static"

# Airflow's dependency: 401 without a valid token, 403 when the auth manager says no
authorized = requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=MIGRATE_DAG)

app = FastAPI(
    title="Ballast console",
    description="Jobs, bin maps, plans, DS2 decisions and events of Ballast (read-only)",
    dependencies=[Depends(authorized)],
    openapi_url=None, docs_url=None, redoc_url=None,  # Starlette routes: app dependencies would not guard them
)

# ------------------------------------------------------------------------------ plumbing

_url_cache: dict[str, Any] = {"url": None, "at": 0.0}
_url_lock = threading.Lock()
URL_TTL_S = 30.0


def _url() -> str:
    """The metrics DB URL from the `ballast_metrics_db` connection (the tasks' hook; the api-server
    resolves connections from the environment and the metastore), cached for URL_TTL_S."""
    with _url_lock:
        if _url_cache["url"] is None or time.monotonic() - _url_cache["at"] > URL_TTL_S:
            from ballast.hooks import BallastMetricsDbHook

            _url_cache["url"], _url_cache["at"] = BallastMetricsDbHook().url(), time.monotonic()
        return str(_url_cache["url"])


def _airflow_base() -> str:
    from ballast.hooks import airflow_base

    return airflow_base()


def _operator(url: str, job: str, operator: str | None) -> str:
    if operator:
        return operator
    for j in console.jobs(url):
        if j["job"] == job:
            return str(j["operator"])
    raise HTTPException(404, f"job {job!r} is not known to the metrics DB or the jobs file")


def _window(window: str) -> str:
    if window not in console.WINDOWS:
        raise HTTPException(422, f"window must be one of {', '.join(console.WINDOWS)}")
    return window


@app.exception_handler(FastAPIHTTPException)
async def _auth_page(request: Request, exc: FastAPIHTTPException) -> Response:
    """A browser without a session gets a page with a login link (same status), an API client JSON."""
    if exc.status_code in (401, 403) and "text/html" in request.headers.get("accept", ""):
        root = request.scope.get("root_path", "")
        try:
            from airflow.api_fastapi.app import get_auth_manager

            login = get_auth_manager().get_url_login(next_url=f"{root}/")
        except Exception:
            login = f"{_airflow_base()}/"
        msg = "Log in to Airflow to see the Ballast console." if exc.status_code == 401 else (
            f"Your Airflow user may not read the runs of {MIGRATE_DAG}, which the Ballast console requires.")
        body = (f"<!doctype html><html><head><title>Ballast console</title></head><body style='font-family:"
                f"system-ui,sans-serif;margin:3rem'><h1>Ballast console</h1><p>{html.escape(msg)}</p>"
                f"<p><a href='{html.escape(login)}' target='_top'>Log in</a></p></body></html>")
        return HTMLResponse(body, status_code=exc.status_code)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=getattr(exc, "headers", None))


# ------------------------------------------------------------------------------ JSON API


def _job_rows(url: str) -> list[dict[str, Any]]:
    """The jobs table's rows, with links to each job's DAG runs: the page's first paint and
    /api/jobs' refreshes draw from the same rows."""
    return dag_run_links.with_dag_links(console.jobs(url))


@app.get("/api/jobs")
def api_jobs() -> list[dict[str, Any]]:
    return _job_rows(_url())


@app.get("/api/jobs/{job}/series")
def api_series(job: str, operator: str | None = None, window: str = "15m") -> dict[str, Any]:
    url = _url()
    return console.series(url, job, _operator(url, job, operator), _window(window))


@app.get("/api/jobs/{job}/binmap")
def api_binmap(job: str, operator: str | None = None, version: int | None = None) -> dict[str, Any]:
    url = _url()
    return console.binmap(url, job, _operator(url, job, operator), version)


@app.get("/api/jobs/{job}/plans")
def api_job_plans(job: str, operator: str | None = None, limit: int = Query(20, ge=1, le=200)) -> list[dict[str, Any]]:
    url = _url()
    return dag_run_links.with_run_links(console_plans.plans(url, job, _operator(url, job, operator), limit), job, "created_at")


@app.get("/api/jobs/{job}/plan-accuracy")
def api_plan_accuracy(job: str, operator: str | None = None,
                      limit: int = Query(20, ge=1, le=200)) -> dict[str, Any]:
    """How far the cost model's pause and duration predictions were off over the recent plans."""
    url = _url()
    return console_plans.prediction_accuracy(console_plans.plans(url, job, _operator(url, job, operator), limit))


@app.get("/api/jobs/{job}/decisions")
def api_decisions(job: str, operator: str | None = None, window: str = "1h") -> list[dict[str, Any]]:
    url = _url()
    return dag_run_links.with_run_links(console.decisions(url, job, _operator(url, job, operator), _window(window)), job, "at")


@app.get("/api/jobs/{job}/events")
def api_events(job: str, window: str = "1h", level: str = "", kind: str = "", q: str = "",
               limit: int = Query(300, ge=1, le=2000)) -> dict[str, Any]:
    return console.events(_url(), job, _window(window), level=level, kind=kind, text=q[:200], limit=limit)


@app.get("/api/jobs/{job}/critical")
def api_critical(job: str, operator: str | None = None, last: int = Query(30, ge=1, le=500)) -> dict[str, Any]:
    url = _url()
    return console_trace.critical_view(url, job, _operator(url, job, operator), last)


@app.get("/api/plans")
def list_plans(job: str | None = None, limit: int = Query(50, ge=1, le=500)) -> list[dict[str, Any]]:
    url = _url()
    return [console_plans.plan_summary(p) for p in store.recent_plans(url, limit, job)]


@app.get("/api/plans/{plan_id}")
def get_plan(plan_id: str) -> dict[str, Any]:
    url = _url()
    p = console_plans.plan(url, plan_id)
    if p is None:
        raise HTTPException(404, f"plan {plan_id} not found")
    from ballast.controller import summary_table

    p["summary"] = summary_table(url, plan_id)
    dag_run_links.with_run_links([p], p["job"], "created_at")
    return p


# ---------------------------------------------------------------------------- static files

_PLOTLY = None


def _plotly_js() -> Path:
    """plotly.js as shipped inside the `plotly` Python package (requirements.txt)."""
    global _PLOTLY
    if _PLOTLY is None:
        _PLOTLY = Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))
    return _PLOTLY


@app.get("/static/{name}")
def static(name: str) -> FileResponse:
    files = {"console.js": STATIC / "console.js", "console.css": STATIC / "console.css",
             "plotly.min.js": _plotly_js()}
    if name not in files or not files[name].is_file():
        raise HTTPException(404, f"no static file {name!r}" + (" (pip install plotly: make setup)"
                                                                if name == "plotly.min.js" else ""))
    return FileResponse(files[name], headers={"Cache-Control": "private, max-age=3600"})


# ------------------------------------------------------------------------------- the page

_BADGE = {"running": "ok", "stale": "warn", "stopped": "bad", "not started": "muted"}


def _fmt(v: Any, unit: str = "", digits: int = 0) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v:,}{unit}" if isinstance(v, int) else f"{v}{unit}"


def _jobs_rows(jobs: list[dict[str, Any]], selected: str | None, root: str) -> str:
    rows = []
    for j in jobs:
        e = html.escape
        plan = j["open_plan"]
        plan_txt = (f"<span class='badge info'>{e(plan['status'])} {plan['applied']}/{plan['steps']}</span> "
                    f"<code>{e(plan['workers'])}</code>") if plan else "–"
        cap = f"{_fmt(j['executors'])} / {_fmt(j['capacity'])}" if j["executors"] is not None or j["capacity"] else "–"
        sel = " class='selected'" if j["job"] == selected else ""
        rows.append(
            f"<tr data-job='{e(j['job'])}' data-operator='{e(j['operator'])}'{sel}>"
            f"<td><a href='{e(root)}/?job={quote(j['job'])}&amp;operator={quote(j['operator'])}'>{e(j['job'])}</a>"
            f"<div class='sub'>{e(j['operator'])}</div></td>"
            f"<td><span class='badge {_BADGE.get(j['status'], 'muted')}' data-field='status'>{e(j['status'])}</span>"
            f"<div class='sub'>{_fmt(j['heartbeat_age_s'], ' s ago', 0)}</div></td>"
            f"<td>{e(j['host'] or '–')}</td><td class='num'>{_fmt(j['epoch'])}</td>"
            f"<td class='num'>{_fmt(j['workers'])}</td><td class='num'>{_fmt(j['map_version'])}</td>"
            f"<td class='num'>{cap}</td><td class='num'>{_fmt(j['input_rate'], '', 0)}</td>"
            f"<td class='num'>{_fmt(j['backlog'])}</td><td class='num'>{_fmt(j['batch_ms'], ' ms', 0)}</td>"
            f"<td>{plan_txt}</td></tr>"
        )
    return "\n".join(rows) or "<tr><td colspan='11' class='muted'>No job has started yet.</td></tr>"


@app.get("/", response_class=HTMLResponse)
def index(request: Request, job: str | None = None, operator: str | None = None, window: str = "15m",
          plan: str | None = None) -> str:
    """The console; `?plan=<id>` (the "Ballast plan" link of an Airflow task) opens that plan's job
    with the plan pinned."""
    url = _url()
    root = request.scope.get("root_path", "").rstrip("/")
    window = window if window in console.WINDOWS else "15m"
    pinned = store.get_plan(url, plan[:200]) if plan else None
    if pinned is not None:
        job, operator = pinned.job, pinned.operator
    jobs = _job_rows(url)
    sel = next((j for j in jobs if j["job"] == job and (not operator or j["operator"] == operator)), None)
    if sel is None and jobs and not job:
        sel = next((j for j in jobs if j["status"] == "running"), jobs[0])
    boot = {"root": root, "airflow": _airflow_base(), "migrate_dag": MIGRATE_DAG, "upgrade_dag": dag_ids.UPGRADE,
            "window": window,
            "job": sel["job"] if sel else None, "operator": sel["operator"] if sel else None, "jobs": jobs,
            "windows": list(console.WINDOWS), "plan": pinned.plan_id if pinned is not None else None}
    e = html.escape
    title = f"{sel['job']} · Ballast" if sel else "Ballast"
    boot_json = json.dumps(boot).replace("</", "<\\/")
    not_found = (f"<p class='warn-box'>Job {e(job)} is not known: pick one above.</p>" if job and sel is None else
                 f"<p class='warn-box'>Plan {e(plan)} is not known (retention may have removed it).</p>"
                 if plan and pinned is None else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="{e(root)}/static/console.css">
<script src="{e(root)}/static/plotly.min.js"></script>
</head><body>
<header class="top">
  <h1>Ballast <span class="sub">console</span></h1>
  <div class="controls">
    <span class="label">window</span>
    <span class="seg" id="window">{"".join(
        f"<button data-window='{w}' class='{'on' if w == window else ''}'>{w}</button>" for w in console.WINDOWS)}</span>
    <span id="live" class="live" title="refreshes by itself">live</span>
    <span id="updated" class="sub"></span>
  </div>
</header>
<main>
<section class="card">
  <h2>Jobs</h2>
  <table class="grid" id="jobs"><thead><tr><th>job</th><th>status</th><th>host</th><th class="num">epoch</th>
  <th class="num">W</th><th class="num">map</th><th class="num">executors / capacity</th><th class="num">input rows/s</th>
  <th class="num">backlog</th><th class="num">batch</th><th>open plan</th></tr></thead>
  <tbody>{_jobs_rows(jobs, sel["job"] if sel else None, root)}</tbody></table>
  {not_found}
</section>
<div id="job" data-job="{e(sel['job']) if sel else ''}"{'' if sel else ' hidden'}>
<section class="card head">
  <div><h2 id="job-title">{e(sel['job']) if sel else ''} <span class="sub">{e(sel['operator']) if sel else ''}</span></h2>
  <div id="job-facts" class="facts"></div><ul id="attention" class="attention"></ul>
  <div id="job-links" class="links"></div></div>
  <div class="actions">
    <button id="plan-btn" class="primary">Plan a migration…</button>
    <button id="upgrade-btn" class="secondary" title="ballast_upgrade: another version of the job's processor, live">Upgrade the processor…</button>
    <a id="dag-link" target="_top" href="{e(_airflow_base())}/dags/{MIGRATE_DAG}">{MIGRATE_DAG} in Airflow ↗</a>
  </div>
</section>
<section class="card">
  <h2>Throughput, backlog, batch time</h2>
  <div id="chart-rate" class="chart"></div>
  <div class="two"><div id="chart-backlog" class="chart"></div><div id="chart-batch" class="chart"></div></div>
</section>
<section class="card" id="critical-section">
  <h2>What holds epochs back <span class="sub">critical path, last 30 epochs</span></h2>
  <p id="bottleneck" class="facts"></p>
  <div class="two"><div id="chart-critical" class="chart"></div><div id="chart-timeline" class="chart"></div></div>
</section>
<section class="card" id="plan-section">
  <h2>Migration plans <span class="sub" id="plan-sub"></span></h2>
  <div id="plan-detail"></div>
  <div class="two" id="plan-charts"><div id="plan-timeline" class="chart"></div><div id="plan-pause" class="chart"></div></div>
  <table class="grid" id="plan-steps"></table>
  <details id="recent-plans-box" open><summary>Recent plans</summary><p class="sub" id="plan-accuracy"></p><table class="grid" id="recent-plans"></table></details>
</section>
<section class="card">
  <h2>Bin map <span class="sub" id="map-sub"></span></h2>
  <div class="controls">
    <span class="label">map version</span><select id="map-version"></select>
    <span class="label">colour</span>
    <span class="seg" id="map-metric"><button data-metric="load" class="on">load (records/epoch)</button><button data-metric="bytes">state bytes</button></span>
  </div>
  <div id="heatmap" class="chart tall"></div>
  <div class="two"><div id="workers" class="chart"></div><div><h3>Hot bins</h3><div id="hot"></div></div></div>
</section>
<section class="card">
  <h2>DS2 decisions</h2>
  <div id="chart-decisions" class="chart"></div>
  <table class="grid" id="decisions"></table>
</section>
<section class="card">
  <h2>Events and rejected control messages</h2>
  <div class="controls">
    <span class="label">level</span><select id="ev-level"><option value="">all</option><option>info</option><option>warning</option><option>error</option></select>
    <span class="label">kind</span><select id="ev-kind"><option value="">all</option></select>
    <input id="ev-text" type="search" placeholder="search messages">
  </div>
  <table class="grid" id="events"></table>
</section>
</div>
</main>
<dialog id="trigger"><form method="dialog" id="trigger-form"></form></dialog>
<script id="boot" type="application/json">{boot_json}</script>
<script src="{e(root)}/static/console.js"></script>
</body></html>"""


class BallastPlugin(AirflowPlugin):
    name = "ballast"
    fastapi_apps = [{"app": app, "url_prefix": "/ballast", "name": "Ballast console"}]
    external_views = [{"name": "Ballast", "href": "/ballast/", "destination": "nav", "url_route": "ballast"}]
    operator_extra_links = [ConsolePlanLink()]  # "Ballast plan" on emit and await tasks (ballast.links)
