"""AirflowPlugin `ballast`: a small read-only page of plans and steps, linked from the Airflow nav.

The FastAPI app is mounted by the api-server under /ballast. Airflow does NOT put its auth in
front of plugin FastAPI apps (NOTES.md): this app only reads, never writes, and shows nothing but
plan metadata — still, keep the api-server on 127.0.0.1 or behind your own proxy auth.
"""

from __future__ import annotations

import html
from typing import Any

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI, HTTPException
from fastapi.responses import HTMLResponse

from ballast import repository as repo

app = FastAPI(title="Ballast", description="Plans and steps of Ballast migrations (read-only)")


def _url() -> str:
    """The api-server's BALLAST_DB_URL (tasks use the ballast_metrics_db connection; outside a task
    the SDK's connection lookup has no supervisor to ask, so the page reads the environment)."""
    from migrations_db.db import default_url

    return default_url()


def _plan_dict(p: repo.PlanRecord) -> dict[str, Any]:
    return {"plan_id": p.plan_id, "job": p.job, "operator": p.operator, "status": p.status,
            "strategy": p.strategy, "created_at": p.created_at.isoformat(),
            "finished_at": p.finished_at.isoformat() if p.finished_at else None,
            "workers": f"{p.source_workers}->{p.target_workers}", "steps": p.steps,
            "source_map_version": p.source_map_version, "predicted_ms": p.predicted_ms, "reason": p.reason}


@app.get("/api/plans")
def list_plans(job: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    return [_plan_dict(p) for p in repo.recent_plans(_url(), min(limit, 500), job)]


@app.get("/api/plans/{plan_id}")
def get_plan(plan_id: str) -> dict[str, Any]:
    url = _url()
    p = repo.get_plan(url, plan_id)
    if p is None:
        raise HTTPException(404, f"plan {plan_id} not found")
    cps = repo.checkpoints(url, plan_id)
    steps = [{"step": s.step, "moves": s.payload.get("moves", []), "workers": s.payload.get("workers"),
              "map_version": s.payload.get("map_version"), "effective_at": s.effective_at.isoformat(),
              "emitted_at": s.emitted_at.isoformat() if s.emitted_at else None,
              "offset": s.kafka_offset, "checkpoint": cps[s.step].to_dict() if s.step in cps else None}
             for s in repo.plan_steps(url, plan_id)]
    from ballast.controller import summary_table

    return {**_plan_dict(p), "step_rows": steps, "summary": summary_table(url, plan_id)}


@app.get("/", response_class=HTMLResponse)
def index(job: str | None = None) -> str:
    url = _url()
    rows = []
    for p in repo.recent_plans(url, 50, job):
        detail = html.escape(__import__("ballast.controller", fromlist=["x"]).summary_table(url, p.plan_id))
        rows.append(
            f"<details><summary><b>{html.escape(p.plan_id)}</b> — {html.escape(p.job)}/{html.escape(p.operator)} "
            f"{html.escape(p.status)}, {html.escape(p.strategy)}, workers {p.source_workers}→{p.target_workers}, "
            f"{p.steps} step(s)</summary><pre>{detail}</pre><p>{html.escape(p.reason)}</p></details>"
        )
    body = "\n".join(rows) or "<p>No plans yet.</p>"
    return (f"<!doctype html><html><head><title>Ballast plans</title></head><body style='font-family:sans-serif'>"
            f"<h1>Ballast plans</h1>{body}</body></html>")


class BallastPlugin(AirflowPlugin):
    name = "ballast"
    fastapi_apps = [{"app": app, "url_prefix": "/ballast", "name": "Ballast plans"}]
    external_views = [{"name": "Ballast plans", "href": "/ballast/", "destination": "nav", "url_route": "ballast"}]
