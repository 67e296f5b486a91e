"""NEXMark Q3 (spark_jobs/nexmark/q3.py) on the processor handle, without Spark: a local person's
auctions are emitted with the person's name, city and state whatever order the topics deliver
them in, each once; the selection before routing keeps local persons and category-10 auctions."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from spark_jobs.nexmark import AUCTION, KIND, PERSON
from spark_jobs.nexmark.q3 import CATEGORY, Q3, STATES, LocalItems
from tests.helpers.processor_key import ProcessorKey


def _person(name: str = "ann", city: str = "Boise", state: str = "ID") -> Any:
    return SimpleNamespace(kind=PERSON, name=name, city=city, state=state)


def _auction(i: int) -> Any:
    return SimpleNamespace(kind=AUCTION, id=i)


def _row(auction: int) -> dict[str, Any]:
    return {"name": "ann", "city": "Boise", "state": "ID", "id": auction}


def test_auctions_of_a_known_person_are_emitted_at_once():
    k = ProcessorKey(LocalItems(), (7,), "None")
    assert k.rows(_person()) == []
    assert k.rows(_auction(70), _auction(71)) == [_row(70), _row(71)]
    assert k.rows(_auction(72)) == [_row(72)] and k.state.lists == {}


def test_auctions_before_their_seller_wait_and_are_emitted_once_the_seller_comes():
    k = ProcessorKey(LocalItems(), (7,), "None")
    assert k.rows(_auction(70)) == [] and k.rows(_auction(71)) == []
    assert k.rows(_person(), _auction(72)) == [_row(70), _row(71), _row(72)]
    assert k.rows(_auction(73)) == [_row(73)], "the waiting auctions were emitted once"
    assert "waiting" not in k.state.lists and not k.state.empty(), "the person is kept for good (no expiry)"


def test_one_batch_with_the_seller_after_its_auctions():
    k = ProcessorKey(LocalItems(), (7,), "None")
    assert k.rows(_auction(1), _auction(2), _person()) == [_row(1), _row(2)]


def test_the_query_keys_persons_and_auctions_by_person_and_selects_before_routing():
    spec = Q3.ballast_query
    assert spec.sources == (PERSON, AUCTION) and spec.grouping_keys == ("person_id",) and spec.time_mode == "None"
    assert dict(spec.columns)["person_id"] == f"CASE WHEN {KIND} = {PERSON} THEN id ELSE seller END"
    assert STATES == ("OR", "ID", "CA") and CATEGORY == 10
    assert spec.where == (f"({KIND} = {PERSON} AND state IN ('OR', 'ID', 'CA')) OR "
                          f"({KIND} = {AUCTION} AND category = 10)")
