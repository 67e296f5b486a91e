"""ballast.plugin: the console app mounted at /ballast answers nothing without Airflow's auth (401,
a login page for a browser), serves only its own static files, refuses an unknown job or window
with 404/422, escapes what it shows and caches the metrics DB URL for a while (the links to DAG
runs: test_dag_run_links.py). Fast: a migrated SQLite metrics DB through the hook's
BALLAST_DB_URL fallback, the auth stood in (the moved route/link tests migrate Airflow's DB)."""

from __future__ import annotations

import json
import time

import pytest
from fastapi import HTTPException

from ballast import plugin
from tests.helpers.jobs import seed_job

pytestmark = pytest.mark.controlplane


@pytest.fixture
def client(console_client, tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The console's app (tests/ballast/conftest.py) on an empty jobs file."""
    (tmp_path / "jobs.yaml").write_text("jobs: []\n")
    monkeypatch.setenv("BALLAST_JOBS_FILE", str(tmp_path / "jobs.yaml"))
    return console_client


def test_every_console_route_refuses_anonymous_callers(airflow_db):
    """Airflow's own dependency guards the whole app (the real api-server: tests/system/test_console_auth.py)."""
    from fastapi.routing import APIRoute
    from fastapi.testclient import TestClient

    from ballast import plugin

    client = TestClient(plugin.app)
    assert all(isinstance(r, APIRoute) for r in plugin.app.routes), "a non-API route escapes the app's auth"
    paths = {r.path for r in plugin.app.routes}
    assert {"/", "/api/jobs", "/api/plans/{plan_id}", "/static/{name}"} <= paths
    for path in paths:
        concrete = path.replace("{job}", "j").replace("{plan_id}", "p").replace("{name}", "console.js")
        res = client.get(concrete, headers={"accept": "application/json"})
        assert res.status_code == 401, (path, res.status_code, res.text)
    page = client.get("/", headers={"accept": "text/html"})
    assert page.status_code == 401 and "Log in" in page.text


def test_a_caller_the_auth_manager_refuses_gets_403_as_a_page_or_json(monkeypatch):
    from fastapi.testclient import TestClient

    def forbidden() -> None:
        raise HTTPException(403, "Forbidden")

    monkeypatch.setitem(plugin.app.dependency_overrides, plugin.authorized, forbidden)
    client = TestClient(plugin.app)
    page = client.get("/", headers={"accept": "text/html"})
    assert page.status_code == 403 and "may not read the runs of ballast_migrate" in page.text
    api = client.get("/api/jobs", headers={"accept": "application/json"})
    assert api.status_code == 403 and api.json() == {"detail": "Forbidden"}


def test_only_the_apps_own_static_files_are_served(client):
    css = client.get("/static/console.css")
    assert css.status_code == 200 and "max-age=3600" in css.headers["cache-control"]
    assert client.get("/static/console.js").status_code == 200
    missing = client.get("/static/app.js")
    assert missing.status_code == 404 and missing.json() == {"detail": "no static file 'app.js'"}
    assert client.get("/static/..%2Fplugin.py").status_code == 404


def test_an_unknown_job_or_window_is_refused(client, db_url):
    assert client.get("/api/jobs").json() == []
    unknown = client.get("/api/jobs/nosuch/binmap")
    assert unknown.status_code == 404 and "job 'nosuch' is not known" in unknown.json()["detail"]
    bad = client.get("/api/jobs/j/decisions", params={"operator": "keycount", "window": "2d"})
    assert bad.status_code == 422 and bad.json()["detail"].startswith("window must be one of ")
    assert client.get("/api/plans/nope").status_code == 404
    assert client.get("/api/plans", params={"limit": 0}).status_code == 422  # a bound of the API, not a crash


def test_the_page_escapes_names_and_says_when_a_job_is_unknown(client, db_url):
    empty = client.get("/", headers={"accept": "text/html"})
    assert empty.status_code == 200 and "No job has started yet." in empty.text
    seed_job(db_url, "a<b>", bins=4, epochs=2)
    page = client.get("/", params={"job": "x</script><script>alert(1)"}, headers={"accept": "text/html"})
    assert page.status_code == 200
    assert "Job x&lt;/script&gt;&lt;script&gt;alert(1) is not known: pick one above." in page.text
    assert "<script>alert(1)" not in page.text and "<tr data-job='a&lt;b&gt;'" in page.text
    boot = page.text.split('<script id="boot" type="application/json">')[1].split("</script>")[0]
    assert json.loads(boot)["jobs"][0]["job"] == "a<b>"  # the page's data, intact: "</" cannot end the script
    picked = client.get("/", params={"job": "a<b>", "window": "nonsense"}, headers={"accept": "text/html"})
    assert "<title>a&lt;b&gt; · Ballast</title>" in picked.text
    assert json.loads(picked.text.split('type="application/json">')[1].split("</script>")[0])["window"] == "15m"


def test_the_first_paint_has_the_rows_the_refreshes_have(client, db_url):
    """The page's own rows (its boot data) carry what /api/jobs' rows carry, links to the job's DAG
    runs included: the facts panel drawn from them is complete before the first refresh (a browser
    test once read the links in the 3 s before it and found only the Spark UI's)."""
    seed_job(db_url, "j1", bins=4, epochs=2)
    page = client.get("/", params={"job": "j1"}, headers={"accept": "text/html"})
    boot = json.loads(page.text.split('<script id="boot" type="application/json">')[1].split("</script>")[0])
    api = client.get("/api/jobs").json()
    assert [r["dags"] for r in boot["jobs"]] == [r["dags"] for r in api]
    assert [d["url"].rsplit("/dags/", 1)[1] for d in boot["jobs"][0]["dags"]] == [
        "ballast_rebalance__j1/runs", "ballast_supervise__j1/runs"]


def test_numbers_are_shown_for_reading() -> None:
    assert plugin._fmt(None) == "–" and plugin._fmt(1234567) == "1,234,567" and plugin._fmt(7, " s") == "7 s"
    assert plugin._fmt(1234.5, " ms", 1) == "1,234.5 ms" and plugin._fmt(0.4) == "0" and plugin._fmt("x", "!") == "x!"


def test_the_db_url_is_cached_for_a_while(monkeypatch, tmp_path):
    plugin._url_cache["url"] = None
    try:
        monkeypatch.setenv("BALLAST_DB_URL", "sqlite:////a.db")
        assert plugin._url() == "sqlite:////a.db"
        monkeypatch.setenv("BALLAST_DB_URL", "sqlite:////b.db")
        assert plugin._url() == "sqlite:////a.db"  # within URL_TTL_S: no connection lookup per request
        plugin._url_cache["at"] = time.monotonic() - plugin.URL_TTL_S - 1
        assert plugin._url() == "sqlite:////b.db"
    finally:
        plugin._url_cache["url"] = None


def test_the_plugin_mounts_the_console_under_ballast() -> None:
    [app] = plugin.BallastPlugin.fastapi_apps
    assert plugin.BallastPlugin.name == "ballast" and app["app"] is plugin.app and app["url_prefix"] == "/ballast"
    assert plugin.BallastPlugin.external_views[0]["href"] == "/ballast/"
