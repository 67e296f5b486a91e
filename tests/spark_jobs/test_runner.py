"""spark_jobs.runner's pure parts: which input topics an operator's query subscribes to."""

from __future__ import annotations

import pytest

from spark_jobs.nexmark import AUCTION, BID, PERSON
from spark_jobs.operator_loader import get_operator
from spark_jobs.processor import QuerySpec
from spark_jobs.run_config import read_topics

TOPICS = ["n.person", "n.auction", "n.bid"]


def test_an_operator_reads_the_topics_its_sources_name_and_all_without():
    assert read_topics(TOPICS, None, "op") == TOPICS
    assert read_topics(TOPICS, (BID,), "op") == ["n.bid"]
    assert read_topics(TOPICS, (AUCTION, PERSON), "op") == ["n.person", "n.auction"]  # in --input-topic order


def test_a_source_beyond_the_input_topics_is_refused_with_what_to_give():
    with pytest.raises(ValueError, match=r"reads input position\(s\) \[2\].*lists 1 topic\(s\): n.bid"):
        read_topics(["n.bid"], (BID,), "q7")
    with pytest.raises(ValueError, match="sources must name input positions"):
        QuerySpec(sources=())


@pytest.mark.parametrize(("path", "sources"), [
    ("spark_jobs.nexmark.stateless:Q1", (BID,)), ("spark_jobs.nexmark.windows:Q5", (BID,)),
    ("spark_jobs.nexmark.q8:Q8", (PERSON, AUCTION)), ("spark_jobs.nexmark.winning:WinningBids", (AUCTION, BID)),
    ("keycount", None)])
def test_nexmark_queries_read_only_the_topics_their_native_twins_subscribe_to(path, sources):
    assert get_operator(path).sources() == sources
