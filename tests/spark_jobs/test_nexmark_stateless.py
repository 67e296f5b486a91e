"""NEXMark Q1 and Q2 (spark_jobs/nexmark/stateless.py): stateless queries over the bids only — Q1
converts each price to euros (x 0.89, rounded down), Q2 keeps the bids of every 123rd auction —
on a real local Spark (their logic is Spark SQL; the full runs against the reference answers are
tests/system/test_nexmark_queries.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.inputs import InputRows
from spark_jobs.nexmark import BID, fields, topics
from spark_jobs.nexmark.stateless import AUCTION_SKIP, Q1, Q2
from spark_jobs.stateless import StatelessOperator
from spark_jobs.storage import Location

pytestmark = [pytest.mark.dataplane, pytest.mark.nexmark]
TOPICS = topics("n").split(",")


def _written(spark: Any, tmp_path: Path, query: Any, events: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """The query's output records (key, value) for `events` = (topic suffix, record), in offset order."""
    records = [(None, json.dumps(doc).encode(), f"n.{t}", 0, i) for i, (t, doc) in enumerate(events)]
    batch = spark.createDataFrame(records, "key binary, value binary, topic string, partition int, offset long")
    src = InputRows(TOPICS, (), Location.of(str(tmp_path))).rows(batch, 1)
    rows = StatelessOperator(query).rows(src, TOPICS).where("__dead = 0").collect()
    return [(r["key"], json.loads(r["value"])) for r in sorted(rows, key=lambda r: r["__o"])]


def _bid(auction: int, price: int, bidder: int = 3) -> tuple[str, dict[str, Any]]:
    return "bid", {"auction": auction, "bidder": bidder, "price": price, "date_time": 1000 + auction}


def test_both_read_the_bids_only_and_write_no_key():
    for q in (Q1, Q2):
        assert q.sources == (BID,) and q.key == ()
    assert AUCTION_SKIP == 123


def test_q1_converts_every_bids_price_and_drops_the_other_records(spark, tmp_path):
    events = [_bid(1, 100), ("person", {"id": 1, "name": "p", "date_time": 5}), _bid(2, 1), _bid(3, 12_345),
              ("auction", {"id": 4, "seller": 1, "date_time": 6})]
    assert _written(spark, tmp_path, Q1, events) == [
        (None, {"auction": 1, "bidder": 3, "price": 89, "date_time": 1001}),
        (None, {"auction": 2, "bidder": 3, "price": 0, "date_time": 1002}),
        (None, {"auction": 3, "bidder": 3, "price": 10_987, "date_time": 1003})]


def test_q2_keeps_the_bids_of_every_123rd_auction(spark, tmp_path):
    events = [_bid(a, 10 + a) for a in (0, 1, 122, 123, 124, 246)] + [("auction", {"id": 123, "date_time": 1})]
    assert _written(spark, tmp_path, Q2, events) == [
        (None, {"auction": a, "price": 10 + a}) for a in (0, 123, 246)]


def test_a_query_parses_the_fields_it_reads_in_the_schemas_order():
    assert Q2.input_schema == fields("price", "auction") == "auction long, price long"
    assert Q1.input_schema == "date_time long, auction long, bidder long, price long"
    with pytest.raises(ValueError, match=r"not NEXMark fields: \['prize'\]"):
        fields("auction", "prize")


def test_a_bad_value_in_a_field_the_query_reads_is_a_dead_letter_one_it_never_reads_is_not(spark, tmp_path):
    """Q2 declares auction and price: a bid whose `extra` is an object still counts, one whose price is
    a word goes to the dead-letter topic with its raw value."""
    good = json.dumps({"auction": 123, "price": 7, "bidder": 3, "date_time": 1, "extra": {"x": [1]}}).encode()
    bad = json.dumps({"auction": 246, "price": "seven", "bidder": 3, "date_time": 1}).encode()
    batch = spark.createDataFrame([(None, good, "n.bid", 0, 0), (None, bad, "n.bid", 0, 1)],
                                  "key binary, value binary, topic string, partition int, offset long")
    src = InputRows(TOPICS, (), Location.of(str(tmp_path))).rows(batch, 1)
    rows = StatelessOperator(Q2).rows(src, TOPICS).collect()
    by_dead = {r["__dead"]: r for r in rows}  # the writer sends a row with a reason to the dead-letter topic
    assert sorted(by_dead) == [0, 1] and by_dead[0]["__reason"] is None and by_dead[1]["__reason"]
    assert json.loads(by_dead[0]["value"]) == {"auction": 123, "price": 7}
    assert bytes(by_dead[1]["value"]) == bad
