"""ballast.store.event_log: events of both planes are kept once (same job, operator, kind, epoch and
message) and read back newest first, by job, filtered by operator and kind, in UTC."""

from __future__ import annotations

import pytest

from ballast import store
from ballast.store.event_log import add_event, events

pytestmark = pytest.mark.store


def test_control_plane_events_are_deduplicated(any_db, unique_name):
    assert store.add_event(any_db, unique_name, "keycount", "error", "plan_timeout", "plan p: no checkpoint")
    assert not store.add_event(any_db, unique_name, "keycount", "error", "plan_timeout", "plan p: no checkpoint")
    assert store.add_event(any_db, unique_name, "keycount", "info", "x", "at epoch", epoch=5)
    assert not store.add_event(any_db, unique_name, "keycount", "info", "x", "at epoch", epoch=5)
    assert store.add_event(any_db, unique_name, "keycount", "info", "x", "at epoch", epoch=6)
    rows = store.events(any_db, unique_name)
    assert sorted((e.kind, e.epoch) for e in rows) == [("plan_timeout", None), ("x", 5), ("x", 6)]



def test_newest_first_filtered_by_operator_and_kind_and_limited(any_db: str) -> None:
    for i in range(4):
        assert add_event(any_db, "j", "keycount", "info", "plan", f"plan {i}", details={"i": i})
    add_event(any_db, "j", "wordcount", "warning", "launch", "launched")
    add_event(any_db, "other", "keycount", "info", "plan", "plan 0")  # another job: never mixed in
    assert [e.message for e in events(any_db, "j")] == ["launched", "plan 3", "plan 2", "plan 1", "plan 0"]
    assert [e.message for e in events(any_db, "j", operator="keycount", limit=2)] == ["plan 3", "plan 2"]
    assert [e.kind for e in events(any_db, "j", kind="launch")] == ["launch"]
    assert events(any_db, "j", operator="wordcount", kind="plan") == [] and events(any_db, "nobody") == []
    newest = events(any_db, "j", operator="keycount")[0]
    assert newest.details == {"i": 3} and newest.level == "info" and newest.epoch is None
    assert newest.at.tzinfo is not None and newest.at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


def test_details_default_to_an_empty_mapping(any_db: str) -> None:
    add_event(any_db, "j", "keycount", "error", "plan_failed", "no details")
    [e] = store.events(any_db, "j")
    assert e.details == {} and e.kind == "plan_failed"
