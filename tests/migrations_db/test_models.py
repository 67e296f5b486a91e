"""migrations_db.models: the constraints the schema itself enforces, on a migrated SQLite DB — at
most one open plan per (job, operator), and an event recorded once per (job, operator, kind,
epoch, message), an event without an epoch included."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy.exc import IntegrityError

from migrations_db import models as m
from migrations_db.db import session_scope

pytestmark = pytest.mark.foundation
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _plan(plan_id: str, status: str, operator: str = "op") -> m.Plan:
    return m.Plan(plan_id=plan_id, job="j", operator=operator, created_at=NOW, strategy="fluid", status=status,
                  source_map_version=0, source_workers=1, target_workers=2, target_assignment=[0, 1], steps=1)


def _event(message: str = "same", epoch: int | None = None, kind: str = "plan_timeout") -> m.Event:
    return m.Event(job="j", operator="op", at=NOW, level="error", kind=kind, message=message, epoch=epoch)


def _add(url: str, *rows: object) -> None:
    with session_scope(url) as s:
        s.add_all(rows)


@pytest.mark.parametrize("first, second", [("planned", "emitting"), ("awaiting_approval", "planned"),
                                           ("emitting", "emitting")])
def test_a_second_open_plan_of_an_operator_is_refused(db_url, first, second):
    assert set(m.OPEN_PLAN_STATUSES) == {"awaiting_approval", "planned", "emitting"}
    _add(db_url, _plan("a", first))
    with pytest.raises(IntegrityError, match="plans"):
        _add(db_url, _plan("b", second))


def test_closed_plans_and_other_operators_do_not_hold_the_operator(db_url):
    _add(db_url, _plan("done", "completed"), _plan("failed", "failed"), _plan("gone", "cancelled"),
         _plan("open", "planned"), _plan("other", "planned", operator="other-op"))
    with session_scope(db_url) as s:
        s.get(m.Plan, "open").status = "completed"  # closing a plan releases its operator in the same UPDATE
    _add(db_url, _plan("next", "emitting"))
    with session_scope(db_url) as s:
        assert s.get(m.Plan, "next").params == {} and s.get(m.Plan, "next").owner == ""


def test_an_event_is_recorded_once_with_or_without_an_epoch(db_url):
    _add(db_url, _event(), _event(epoch=7), _event(epoch=8), _event("other"), _event(kind="plan_failed"))
    with session_scope(db_url) as s:
        rows = s.query(m.Event).filter_by(message="same", kind="plan_timeout")
        assert sorted((e.dedup_epoch, e.epoch) for e in rows) == [(m.NO_EPOCH, None), (7, 7), (8, 8)]
        assert m.NO_EPOCH == -1
    for dup in (_event(), _event(epoch=7)):  # equal control-plane events (no epoch) are one, as data-plane ones
        with pytest.raises(IntegrityError, match="events"):
            _add(db_url, dup)


def test_a_new_rows_json_fields_start_empty(db_url):
    _add(db_url, m.Job(job="j", operator="op", bins=8, created_at=NOW), _event())
    with session_scope(db_url) as s:
        assert s.get(m.Job, ("j", "op")).config == {}
        assert s.query(m.Event).one().details == {}
