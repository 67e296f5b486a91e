"""The console's view of a handover (docs/handover.md): a windowed processor's bins change owner at a
window boundary with no state moved. From a seeded decision log: both owners of each bin, the
event-time timestamps as UTC times, the watermark and the old owner's windows still open while the
step waits, then its checkpoint's 0 bytes; for a step a person sent (no stored plan) on the job's
row, and for a stored plan's step in its row of the plan. The page draws it (static/console.js;
in a real browser: tests/system/test_console_browser.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ballast import console, console_plans, store
from tests.helpers.jobs import seed_job
from tests.helpers.store_seed import NOON_MS, handover_applied, log_waiting_handover

pytestmark = pytest.mark.controlplane

OP = "keycount"
WAITING = ("handover of 4 bins 0→1: the old owner finishes the windows up to 12:00:15.000; 1 window left; "
           "watermark 12:00:13.200 (event time, UTC)")
APPLIED = ("handover of 4 bins 0→1 complete in epoch 10: the old owner finished the windows up to 12:00:15.000 "
           "(event time, UTC); 0 bytes of state moved by handover")


@pytest.fixture
def client(airflow_db, console_client):  # type: ignore[no-untyped-def]
    return console_client


def _row(client, job: str) -> dict:  # type: ignore[no-untyped-def]
    return next(j for j in client.get("/api/jobs").json() if j["job"] == job)


def test_a_handover_sent_by_hand_shows_on_the_job_while_it_waits_then_its_0_bytes(client, db_url, unique_name):
    job = unique_name
    seed_job(db_url, job, bins=16, workers=2, epochs=6)
    assert _row(client, job)["handover"] is None
    log_waiting_handover(db_url, "by-hand", 1, [7, 8, 9], [None, NOON_MS + 8_000, NOON_MS + 13_200], job=job,
                         operator=OP)
    h = _row(client, job)["handover"]
    assert (h["plan_id"], h["step"], h["status"], h["since_epoch"], h["epoch"]) == ("by-hand", 1, "waiting", 7, 9)
    assert h["sentence"] == WAITING
    # both owners of each bin
    assert h["moves"] == [{"bin": b, "from": 0, "to": 1} for b in (3, 5, 9, 12)] and h["owners"] == "0→1"
    # event time as UTC times, not raw ms
    assert (h["migration_at"], h["activation_at"], h["boundary_at"], h["watermark_at"]) == (
        "2026-01-01T12:00:05.000+00:00", "2026-01-01T12:00:10.000+00:00", "2026-01-01T12:00:15.000+00:00",
        "2026-01-01T12:00:13.200+00:00")
    assert h["windows_left"] == 1 and h["checkpoint"] is None
    assert h["history"] == {"epoch": [7, 8, 9], "watermark_at": [None, "2026-01-01T12:00:08.000+00:00",
                                                                 "2026-01-01T12:00:13.200+00:00"]}

    handover_applied(db_url, "by-hand", 1, 10, job=job, operator=OP)
    h = _row(client, job)["handover"]
    assert h["status"] == "applied" and h["sentence"] == APPLIED and h["windows_left"] == 0
    cp = h["checkpoint"]
    assert (cp["bytes_moved"], cp["keys_moved"], cp["bins_moved"], cp["applied_epoch"]) == (0, 0, 4, 10)
    # an ended handover is news for an hour
    later = datetime.now(UTC) + timedelta(hours=2)
    assert console.job_handover(db_url, job, OP, later) is None


def test_a_waiting_handover_before_the_first_watermark_and_a_superseded_one(db_url, unique_name):
    job = unique_name
    log_waiting_handover(db_url, "p", 2, [3], [None], job=job, operator=OP, moves=((1, 2, 0), (4, 1, 0), (6, 2, 0)))
    h = console.job_handover(db_url, job, OP, datetime.now(UTC))
    assert h is not None and h["windows_left"] is None and h["watermark_at"] is None
    assert h["owners"] == "1→0, 2→0"
    assert h["sentence"] == ("handover of 3 bins 1→0, 2→0: the old owner finishes the windows up to 12:00:15.000; "
                             "watermark not known yet (event time, UTC)")
    from migrations_db import models as m
    from migrations_db.db import session_scope

    with session_scope(db_url) as s:
        s.add(m.StepCheckpoint(job=job, operator=OP, plan_id="p", step=2, status="superseded",
                               completed_at=datetime.now(UTC), reason="superseded by plan q"))
    h = console.job_handover(db_url, job, OP, datetime.now(UTC))
    assert h is not None and h["status"] == "superseded"
    assert h["sentence"] == ("handover of 3 bins 1→0, 2→0 superseded: superseded by plan q; "
                             "the old owner keeps the bins")


def test_a_stored_plans_handover_step_shows_in_its_row(client, db_url, unique_name):
    """A plan's handover step: in flight, its row says the handover's progress in one sentence
    (not the log's raw ms) and carries the view; once applied, 0 bytes moved by handover."""
    job = unique_name
    seed_job(db_url, job, bins=16, workers=2, epochs=6)
    now = datetime.now(UTC)
    moves = [{"bin": b, "from": 0, "to": 1} for b in (3, 5, 9, 12)]
    plan = store.PlanRecord("ho-plan", job, OP, now, "manual", "emitting", 0, 2, 2, tuple([0] * 8 + [1] * 8), 2,
                            {}, None, "rebalance by handover", None)
    steps = [store.StepRecord("ho-plan", 1, {"kind": "moves", "moves": moves, "workers": 2, "handover": True},
                              now, None, None, None, None),
             store.StepRecord("ho-plan", 2, {"kind": "moves", "moves": [{"bin": 0, "from": 0, "to": 1}], "workers": 2},
                              now, None, None, None, None)]
    store.save_plan(db_url, plan, steps)
    store.mark_step_emitted(db_url, "ho-plan", 1, now, 0, 21)
    log_waiting_handover(db_url, "ho-plan", 1, [7, 8, 9], [None, NOON_MS + 8_000, NOON_MS + 13_200], job=job,
                         operator=OP)
    first, second = console_plans.plan(db_url, "ho-plan")["step_rows"]  # type: ignore[index]
    assert first["status"] == "in flight" and first["reason"] == WAITING
    assert first["handover"]["status"] == "waiting" and first["handover"]["boundary_at"].endswith("12:00:15.000+00:00")
    assert second["handover"] is None
    assert _row(client, job)["handover"]["plan_id"] == "ho-plan"

    handover_applied(db_url, "ho-plan", 1, 10, job=job, operator=OP)
    detail = client.get("/api/plans/ho-plan").json()
    first = detail["step_rows"][0]
    assert (first["status"], first["bytes"], first["keys"], first["reason"]) == ("applied", 0, 0, APPLIED)
    assert first["handover"]["checkpoint"]["bytes_moved"] == 0 and detail["bytes_moved"] == 0


def test_a_session_handover_shows_the_keys_holding_it_open_not_windows(db_url, unique_name):
    """Session windows have no grid: while the step waits the console counts the keys that still hold
    it open (the new owners' report), and says sessions, not windows; applied, 0 keys open, 0 bytes."""
    from ballast.store import writer
    from tests.helpers.store_seed import Entry

    job, first = unique_name, NOON_MS + 5_000
    for e, wm, n in ((7, None, None), (8, NOON_MS + 9_000, 12), (9, NOON_MS + 16_000, 1)):
        p = {"since": 7, "migration": first, "activation": first + 10_000, "boundary": first + 10_000,
             "gap": 10_000, "moves": [[3, 0, 1], [5, 0, 1]], "watermark": wm, "windows_left": None, "keys_open": n}
        writer.write_step_decisions(db_url, job, OP, e, [Entry(0, "s", 1, "queue", "handover: …", job=job,
                                                               operator=OP, handover=p)])
    h = console.job_handover(db_url, job, OP, datetime.now(UTC))
    assert h is not None and h["sessions"] and h["gap_ms"] == 10_000 and h["windows_left"] is None
    assert h["keys_open"] == 1 and h["watermark_at"] == "2026-01-01T12:00:16.000+00:00"
    assert h["sentence"] == ("handover of 2 bins 0→1: the old owner finishes the sessions started before "
                             "12:00:15.000; 1 key still open; watermark 12:00:16.000 (event time, UTC)")
    handover_applied(db_url, "s", 1, 10, job=job, operator=OP, bins=2)
    h = console.job_handover(db_url, job, OP, datetime.now(UTC))
    assert h is not None and h["status"] == "applied" and h["keys_open"] == 0
    assert h["sentence"] == ("handover of 2 bins 0→1 complete in epoch 10: the old owner finished the sessions "
                             "started before 12:00:15.000 (event time, UTC); 0 bytes of state moved by handover")
