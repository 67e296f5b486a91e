"""The console and its JSON API sit behind Airflow's auth manager, on the real api-server."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from migrations_db import models as m
from migrations_db.db import session_scope

pytestmark = [pytest.mark.ui, pytest.mark.slow]


def test_anonymous_callers_get_401_and_a_logged_in_user_gets_the_console(console_stack):
    st = console_stack
    paths = ["/ballast/", "/ballast/api/jobs", f"/ballast/api/jobs/{st.job}/binmap",
             f"/ballast/api/jobs/{st.job}/series",
             f"/ballast/api/jobs/{st.job}/events", "/ballast/api/plans", "/ballast/api/plans/x",
             "/ballast/static/console.js", "/ballast/static/plotly.min.js"]
    for path in paths:
        code, body = st.get(path)
        assert code == 401, (path, code, body[:200])
    code, body = st.get("/ballast/", accept="text/html")
    assert code == 401 and "Log in" in body and "/auth/login" in body
    for path in ("/ballast/openapi.json", "/ballast/docs"):  # no unauthenticated side door
        assert st.get(path)[0] in (401, 404), path
    code, _ = st.get("/ballast/api/jobs", token="not-a-token")
    assert code in (401, 403)

    # the console reads the metrics DB of the ballast_metrics_db connection (BALLAST_DB_URL is a decoy)
    with session_scope(st.db_url) as s:
        s.add(m.Job(job="seen-through-the-connection", operator="keycount", bins=8,
                    created_at=datetime.now(UTC), config={}))
    token = st.token()
    try:
        code, body = st.get("/ballast/api/jobs", token=token)
        assert code == 200, body[:500]
        names = {j["job"] for j in json.loads(body)}
        assert {st.job, "seen-through-the-connection"} <= names
    finally:
        with session_scope(st.db_url) as s:
            s.query(m.Job).filter(m.Job.job == "seen-through-the-connection").delete()
    code, body = st.get(f"/ballast/?job={st.job}", token=token, accept="text/html")
    assert code == 200 and f"data-job='{st.job}'" in body and "plotly.min.js" in body
    code, body = st.get("/ballast/static/plotly.min.js", token=token)
    assert code == 200 and len(body) > 1_000_000

    # registered the Airflow 3 way: a FastAPI app plus a nav entry
    code, body = st.get("/api/v2/plugins", token=token)
    plugin = next(p for p in json.loads(body)["plugins"] if p["name"] == "ballast")
    assert plugin["fastapi_apps"][0]["url_prefix"] == "/ballast"
    assert plugin["external_views"][0]["href"] == "/ballast/" and plugin["external_views"][0]["destination"] == "nav"
