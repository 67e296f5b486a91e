"""The console's JSON API and page, in process (the auth manager is stood in for here;
tests/system/test_console_auth.py checks the real one in front of the real api-server; the app's
own routes, auth and links: test_plugin.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from ballast import console, controller, store
from ballast.config import get_job
from ballast.policy import GuardConfig, GuardState, Observation, evaluate_guards
from ballast.store.event_log import CACHE_DEGRADED
from migrations_db import models as m
from migrations_db.db import session_scope
from tests.helpers.stepapplier import seed_job

pytestmark = pytest.mark.controlplane


@pytest.fixture
def client(airflow_db, console_client):  # type: ignore[no-untyped-def]
    return console_client


def _running(url: str, job: str, workers: int = 2, epoch: int = 5) -> None:
    now = datetime.now(UTC)
    with session_scope(url) as s:
        s.add(m.Heartbeat(job=job, operator="keycount", last_epoch=epoch, map_version=0, workers=workers,
                          updated_at=now, started_at=now - timedelta(minutes=3), pid=4242, host="node-a",
                          status="running", executors=2, capacity=4, spark_ui_url="http://127.0.0.1:4041"))


def _running_job_with_a_plan(db_url: str, jobs_file, job: str):  # type: ignore[no-untyped-def]
    """A running 2-worker job with six epochs of metrics and a stored 2 -> 3 fluid plan: (plan id, steps)."""
    jobs_file(bins=16)
    seed_job(db_url, job, bins=16, workers=2, epochs=6)
    _running(db_url, job)
    plan_id = controller.plan_manual(db_url, get_job(job), {"target_workers": 3, "strategy": "fluid",
                                                          "dry_run": False})["plan_id"]
    return plan_id, store.plan_steps(db_url, plan_id)


def test_console_api_shows_job_map_plan_decisions_events(client, db_url, jobs_file, unique_name):
    job = unique_name
    plan_id, steps = _running_job_with_a_plan(db_url, jobs_file, job)
    now = datetime.now(UTC)
    store.mark_step_emitted(db_url, plan_id, 1, now, 0, 11)
    moved = steps[0].payload["moves"]
    with session_scope(db_url) as s:
        s.add(m.StepCheckpoint(job=job, operator="keycount", plan_id=plan_id, step=1, status="applied", applied_epoch=7,
                           applied_at=now, completed_at=now + timedelta(seconds=1), bins_moved=len(moved),
                           keys_moved=10, bytes_moved=12345, migration_ms=42.0, map_version_after=1, reason=""))
        s.add(m.StepCheckpoint(job=job, operator="keycount", plan_id="old-plan", step=1, status="rejected",
                           completed_at=now, reason="expected map version 3, job is at 5"))
        s.add(m.Event(job=job, operator="keycount", at=now, level="warning", kind="control_rejected",
                      message="bad control message: not JSON", epoch=4, details={"offset": 9}))
    store.add_event(db_url, job, "keycount", "info", "launch", "launched the job")
    store.save_decision(db_url, job, "keycount", current_workers=2, proposed_workers=3, target_workers=3,
                       action="scale_up", reason="scale up 2->3: DS2 proposes 3, 1 decision(s) agree",
                       inputs={"utilization": 0.93, "target_utilization": 0.7, "utilization_band": 0.2},
                       plan_id=plan_id)

    jobs = client.get("/api/jobs").json()
    row = next(j for j in jobs if j["job"] == job)
    assert row["status"] == "running" and row["host"] == "node-a" and row["workers"] == 2
    assert (row["executors"], row["capacity"], row["bins"]) == (2, 4, 16)
    assert row["open_plan"]["plan_id"] == plan_id and row["open_plan"]["applied"] == 1
    assert (row["trigger_ms"], row["max_records_per_epoch"]) == (None, None), "a seeded job recorded no start"
    from ballast.store import writer

    writer.ensure_job_row(db_url, job, "keycount", 16, {"trigger_ms": 500, "max_offsets_per_trigger": 2000}, now)
    row = next(j for j in client.get("/api/jobs").json() if j["job"] == job)
    assert (row["trigger_ms"], row["max_records_per_epoch"]) == (500, 2000), "the settings in force, per job"
    # where else to look: the driver's Spark UI, the job's DAG runs, its topics (no Kafka UI configured)
    assert row["spark_ui"] == "http://127.0.0.1:4041"
    assert [d["url"] for d in row["dags"]] == [f"/dags/ballast_{k}__{job}/runs" for k in ("rebalance", "supervise")]
    topics = {t["role"]: t for t in row["topics"]}
    assert topics["reads"]["topic"] == f"{job}.in" and topics["signals"]["topic"] == f"{job}.signals"
    assert all(t["url"] is None for t in row["topics"])

    series = client.get(f"/api/jobs/{job}/series", params={"window": "15m"}).json()
    assert len(series["t"]) == 6 and series["input_rate"][0] == 15000.0 and series["workers"][0] == 2
    assert [p["plan_id"] for p in series["plans"]] == [plan_id]
    assert client.get(f"/api/jobs/{job}/series", params={"window": "2d"}).status_code == 422

    bm = client.get(f"/api/jobs/{job}/binmap").json()
    assert bm["map"]["bins"] == 16 and bm["map"]["workers"] == 2 and len(bm["load"]) == 16
    assert bm["window"]["epochs"] == 6 and all(x > 0 for x in bm["load"]) and bm["bytes"][15] == 10000 + 1500
    assert sum(w["bins"] for w in bm["per_worker"]) == 16 and bm["per_worker"][0]["busy"] == pytest.approx(1.0)
    pending_bins = {int(b) for b in bm["pending"]}
    later = {mv["bin"] for s in steps[1:] for mv in s.payload["moves"]}
    assert pending_bins == later and not pending_bins & {mv["bin"] for mv in moved}
    assert client.get(f"/api/jobs/{job}/binmap", params={"version": 0}).json()["map"]["version"] == 0

    plans = client.get(f"/api/jobs/{job}/plans").json()
    assert plans[0]["plan_id"] == plan_id and plans[0]["applied"] == 1
    # pause against pause over the applied step, duration against duration (none yet: the plan is open)
    assert plans[0]["pause_measured_ms"] == 42.0 and plans[0]["pause_predicted_ms"] == steps[0].predicted_ms
    assert plans[0]["duration_predicted_ms"] == store.get_plan(db_url, plan_id).predicted_ms  # type: ignore[union-attr]
    assert plans[0]["duration_measured_ms"] is None
    detail = client.get(f"/api/plans/{plan_id}").json()
    assert [r["status"] for r in detail["step_rows"]] == ["applied"] + ["pending"] * (len(steps) - 1)
    first = detail["step_rows"][0]
    assert first["pause_ms"] == 42.0 and first["bytes"] == 12345 and first["applied_epoch"] == 7
    assert first["latency_s"] == pytest.approx(1.0) and first["predicted_ms"] is not None
    assert detail["open"] and detail["wall_s"] == pytest.approx(1.0) and "summary" in detail
    assert client.get("/api/plans/nope").status_code == 404

    ds = client.get(f"/api/jobs/{job}/decisions", params={"window": "1h"}).json()
    assert ds[0]["guard"] == "scale up" and ds[0]["utilization"] == 0.93 and ds[0]["plan_id"] == plan_id

    ev = client.get(f"/api/jobs/{job}/events", params={"window": "1h"}).json()
    kinds = [e["kind"] for e in ev["events"]]
    assert {"control_rejected", "step_rejected", "launch", "plan"} <= set(kinds)
    assert "control_rejected" in ev["kinds"]
    only = client.get(f"/api/jobs/{job}/events", params={"kind": "control_rejected"}).json()["events"]
    assert [e["message"] for e in only] == ["bad control message: not JSON"]
    warn = client.get(f"/api/jobs/{job}/events", params={"level": "warning", "q": "MAP VERSION"}).json()["events"]
    assert [e["kind"] for e in warn] == ["step_rejected"]

    page = client.get("/", params={"job": job}, headers={"accept": "text/html"})
    assert page.status_code == 200 and f"data-job='{job}'" in page.text
    assert "/static/plotly.min.js" in page.text and "ballast_migrate" in page.text
    # an Airflow task's "Ballast plan" link: the plan's job selected and the plan pinned
    page = client.get("/", params={"plan": plan_id}, headers={"accept": "text/html"})
    boot = json.loads(page.text.split('id="boot"', 1)[1].split(">", 1)[1].split("</script>", 1)[0])
    assert (boot["job"], boot["operator"], boot["plan"]) == (job, "keycount", plan_id)
    gone = client.get("/", params={"plan": "no-such-plan"}, headers={"accept": "text/html"})
    assert gone.status_code == 200 and "Plan no-such-plan is not known" in gone.text
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000
    assert client.get("/static/../plugin.py").status_code == 404


def test_job_status_running_stale_stopped():
    now = datetime.now(UTC)
    hb = store.HeartbeatRow(1, 0, 1, now - timedelta(seconds=30), now, 1, "h", "running")
    assert console.job_status(None, 120) == "not started"
    assert console.job_status(hb, 120, now) == "running"
    assert console.job_status(hb, 10, now) == "stale"
    assert console.job_status(store.HeartbeatRow(1, 0, 1, now, now, 1, "h", "stopped"), 120, now) == "stopped"


def test_guard_labels_name_the_guard_that_decided():
    cfg = GuardConfig(min_workers=1, max_workers=4, warmup_s=60, warmup_epochs=0, activation=2,
                      target_utilization=0.7, utilization_band=0.1, scale_down_delay_s=600)

    def label(state: GuardState, cur: int, prop: int, util: float, now: float = 1000.0) -> str:
        d, _ = evaluate_guards(Observation(now, 10, cur, prop, util, 100.0), state, cfg)
        return console.guard_of(d.action, d.reason)

    assert label(GuardState(last_change_at=990.0), 2, 3, 0.95) == "warm-up"
    assert label(GuardState(), 6, 3, 0.95) == "bounds"
    assert label(GuardState(), 2, 3, 0.72) == "utilization band"
    assert label(GuardState(), 2, 2, 0.95) == "DS2 = current"
    assert label(GuardState(), 2, 3, 0.95) == "activation"
    assert label(GuardState(history=[3], history_direction="up"), 2, 3, 0.95) == "scale up"
    assert label(GuardState(history=[1], history_direction="down", down_since=900.0), 2, 1, 0.2) == "scale-down delay"
    assert label(GuardState(history=[1], history_direction="down", down_since=100.0), 2, 1, 0.2) == "scale down"
    assert console.guard_of("rebalance", "whatever") == "skew"


def test_window_bound_is_the_first_epoch_that_ended_in_it(db_url):
    """The binary search over epochs (with gaps, as after a restart) agrees with a plain scan."""
    now = datetime.now(UTC)
    epochs = [1, 2, 3, 7, 8, 9, 20, 21, 40]
    ended = {e: now - timedelta(seconds=100 - 2 * e) for e in epochs}
    with session_scope(db_url) as s:
        for e in epochs:
            s.add(m.EpochMetrics(job="j", operator="op", epoch=e, map_version=0, workers=1, input_rows=1, batch_ms=1.0,
                                 input_rate=1.0, backlog=0, started_at=ended[e], ended_at=ended[e]))
    assert store.epoch_at_or_after(db_url, "nope", "op", now) is None
    for back in (200, 98, 97, 60, 59, 40, 21, 20, 19, 1):
        since = now - timedelta(seconds=back)
        want = min((e for e in epochs if ended[e] >= since), default=None)
        assert store.epoch_at_or_after(db_url, "j", "op", since) == want, back
    assert [p.last_epoch for p in store.epoch_series(db_url, "j", "op", now - timedelta(seconds=59))] == [21, 40]


def test_dead_letters_are_counted_per_job_and_flagged(db_url, unique_name):
    """The data plane counts dead letters per epoch (epoch_metrics.dead_letters); the console shows
    the job's total and warns about the last 15 minutes' (an old one is history, not news)."""
    from tests.helpers.jobs import seed_job as seed_metrics

    job = unique_name
    seed_metrics(db_url, job, epochs=3)
    now = datetime.now(UTC)
    em = m.EpochMetrics
    with session_scope(db_url) as s:
        s.execute(update(em).where(em.job == job, em.epoch == 1).values(dead_letters=5,
                                                                        ended_at=now - timedelta(hours=2)))
        s.execute(update(em).where(em.job == job, em.epoch == 3).values(dead_letters=2))
    assert store.dead_letter_counts(db_url, job, "keycount", now - timedelta(minutes=15)) == (7, 2)
    row = next(j for j in console.jobs(db_url) if j["job"] == job)
    assert row["dead_letters"] == 7
    warn = [a["text"] for a in console.attention(db_url, job, "keycount", "running", None, 120.0, now)]
    assert any(f"2 record(s) went to the dead-letter topic {job}.dlq" in t for t in warn)
    assert store.dead_letter_counts(db_url, "no-such-job", "keycount", now) == (0, 0)


def test_a_rebuilt_cache_shows_the_job_degraded_for_15_minutes(db_url, unique_name):
    job = unique_name
    seed_job(db_url, job, 8)
    _running(db_url, job)
    row = next(r for r in console.jobs(db_url) if r["job"] == job)
    assert not row["degraded"] and not any("degraded" in a["text"] for a in row["attention"])
    store.add_event(db_url, job, "keycount", "warning", CACHE_DEGRADED,
                   "worker 1: local cache /c/worker-0001 failed (DiskError: No space left on device); ...", epoch=7)
    row = next(r for r in console.jobs(db_url) if r["job"] == job)
    assert row["degraded"] and row["status"] == "running"  # degraded, not down
    text = [a["text"] for a in row["attention"] if "degraded" in a["text"]]
    assert text and "No space left on device" in text[0] and "runs on" in text[0], row["attention"]
    later = next(r for r in console.jobs(db_url, now=datetime.now(UTC) + timedelta(minutes=16)) if r["job"] == job)
    assert not later["degraded"]
    assert CACHE_DEGRADED in console.events(db_url, job, "1h")["kinds"]


def test_plan_rows_compare_like_with_like_and_accuracy_spans_recent_plans(client, db_url, jobs_file, unique_name):
    """A finished plan shows its pause (predicted vs measured, same steps) and its duration
    (predicted vs first emit → last checkpoint); the accuracy line summarises recent plans."""
    job = unique_name
    plan_id, steps = _running_job_with_a_plan(db_url, jobs_file, job)
    t0 = datetime.now(UTC)
    with session_scope(db_url) as s:
        for i, st in enumerate(steps):
            s.add(m.StepCheckpoint(job=job, operator="keycount", plan_id=plan_id, step=st.step, status="applied",
                                   applied_epoch=7 + i, applied_at=t0 + timedelta(seconds=2 * i + 1),
                                   completed_at=t0 + timedelta(seconds=2 * i + 1), bins_moved=1, keys_moved=1,
                                   bytes_moved=1, migration_ms=2.0 * (st.predicted_ms or 0), map_version_after=i + 1,
                                   reason=""))
        s.execute(update(m.Plan).where(m.Plan.plan_id == plan_id).values(status="completed"))
    for i, st in enumerate(steps):
        store.mark_step_emitted(db_url, plan_id, st.step, t0 + timedelta(seconds=2 * i), 0, 20 + i)

    [row] = client.get(f"/api/jobs/{job}/plans").json()
    predicted_pause = sum(st.predicted_ms or 0 for st in steps)
    assert row["pause_predicted_ms"] == pytest.approx(predicted_pause)
    assert row["pause_measured_ms"] == pytest.approx(2 * predicted_pause)
    assert row["duration_measured_ms"] == pytest.approx(1000.0 * (2 * (len(steps) - 1) + 1))
    acc = client.get(f"/api/jobs/{job}/plan-accuracy").json()
    assert acc["pause"] == {"plans": 1, "median_ratio": pytest.approx(2.0), "median_abs_error": pytest.approx(1.0)}
    assert acc["duration"]["plans"] == 1
    assert acc["duration"]["median_ratio"] == pytest.approx(row["duration_measured_ms"] / row["duration_predicted_ms"])


def test_topics_link_to_the_kafka_ui_when_one_is_configured(monkeypatch):
    monkeypatch.setenv("BALLAST_KAFKA_UI_URL", "http://kafka-ui:8080/ui/clusters/local/all-topics/{topic}")
    links = {t["role"]: t["url"] for t in console.topic_links("clicks", ["clicks.in"])}
    assert links["reads"] == "http://kafka-ui:8080/ui/clusters/local/all-topics/clicks.in"
    assert links["dead letters"] == "http://kafka-ui:8080/ui/clusters/local/all-topics/clicks.dlq"
