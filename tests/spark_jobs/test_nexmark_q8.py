"""NEXMark Q8 (spark_jobs/nexmark/q8.py) on the processor handle, without Spark: a person and the
auctions they opened in the tumbling window they registered in are emitted once, at the window's
event-time end, whatever order they arrive in; other windows' auctions are not, and no key keeps
state after its last window closed."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spark_jobs.nexmark import AUCTION, KIND, LATENESS_MS, PERSON, WINDOW_MS
from spark_jobs.nexmark.q8 import Q8, NewUsers
from tests.helpers.processor_key import ProcessorKey


def _person(window: int, name: str = "ann") -> Any:
    return SimpleNamespace(kind=PERSON, window_start=window, name=name)


def _auction(window: int, i: int, reserve: int = 5) -> Any:
    return SimpleNamespace(kind=AUCTION, window_start=window, id=i, reserve=reserve)


def _pair(window: int, auction: int, reserve: int = 5) -> dict[str, Any]:
    return {"window_start": window, "window_end": window + WINDOW_MS, "id": 7, "name": "ann", "reserve": reserve,
            "auction": auction}


def test_a_new_users_auctions_of_its_window_are_emitted_once_at_the_windows_end():
    k = ProcessorKey(NewUsers(), (7,))
    assert k.rows(_auction(0, 72, reserve=9), _person(0), _auction(0, 71)) == []  # an auction before its seller too
    assert k.state.timers == {WINDOW_MS}
    assert k.fire(WINDOW_MS - 1) == []
    assert k.fire(WINDOW_MS) == [_pair(0, 71), _pair(0, 72, reserve=9)]  # by auction id
    assert k.state.empty() and k.fire(10 * WINDOW_MS) == []


def test_auctions_of_another_window_than_the_registration_are_not_new_users():
    k = ProcessorKey(NewUsers(), (7,))
    k.rows(_person(0), _auction(WINDOW_MS, 80))
    assert k.fire(WINDOW_MS) == [], "registered in [0, w), the auction is in [w, 2w)"
    assert k.fire(2 * WINDOW_MS) == [] and k.state.empty()


def test_a_seller_without_a_registration_keeps_nothing_past_the_window():
    k = ProcessorKey(NewUsers(), (7,))
    k.rows(_auction(0, 1), _auction(0, 2))
    assert k.fire(WINDOW_MS) == [] and k.state.empty()


def test_the_query_keys_by_person_and_windows_by_event_time():
    spec = Q8.ballast_query
    assert spec.sources == (PERSON, AUCTION) and spec.grouping_keys == ("person_id",)
    assert spec.time_mode == "EventTime" and spec.event_time_column == "date_time"
    assert spec.lateness_ms == LATENESS_MS and spec.where == f"{KIND} IN ({PERSON}, {AUCTION})"
    assert dict(spec.columns)["window_start"] == f"date_time - date_time % {WINDOW_MS}"
