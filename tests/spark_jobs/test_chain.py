"""How a multi-operator job is laid out (spark_jobs.chain), and each operator taking only its own
control steps — no Spark, no broker needed. The CLI refusing a bad chain: test_cli.py."""

from __future__ import annotations

import pytest

from spark_jobs.chain import ChainError, OperatorSpec, operator_configs
from spark_jobs.control import ControlRecord, decide
from spark_jobs.control_state import initial_state
from spark_jobs.runner import RunConfig

pytestmark = pytest.mark.dataplane


def test_each_operator_gets_its_dirs_topics_and_siblings():
    base = RunConfig(job="q4", input_topic="auctions,bids", checkpoint_dir="/c", bootstrap="b", db_url="sqlite://",
                     state_uri="s3://bucket/q4")
    join, avg = operator_configs(base, [OperatorSpec.parse("join=mod:Join"), OperatorSpec.parse("avg=keycount")])
    assert (join.operator, join.path, join.input_topics, join.handoff_inputs) == (
        "join", "mod:Join", ["auctions", "bids"], ())
    assert (join.output_topic, avg.input_topic, avg.handoff_inputs, avg.output_topic) == (
        "q4.join.out", "q4.join.out", ("q4.join.out",), "q4.output")
    assert (join.checkpoint_dir, avg.state_location) == ("/c/join", "s3://bucket/q4/avg")
    assert join.siblings == ("avg",) and avg.siblings == ("join",)
    assert OperatorSpec.parse("keycount") == OperatorSpec("keycount", "keycount")
    assert OperatorSpec.parse("mod.sub:WindowCounts").name == "windowcounts"
    with pytest.raises(ChainError, match="names must be unique"):
        operator_configs(base, [OperatorSpec.parse("a=keycount"), OperatorSpec.parse("a=wordcount")])
    with pytest.raises(ChainError, match="use letters, digits"):
        OperatorSpec.parse("a b=keycount")


def test_a_sibling_operators_step_is_skipped_not_rejected():
    from datetime import UTC, datetime

    from ballast.protocol import ControlStep

    step = ControlStep(job="q4", operator="avg", plan_id="p", step=1, steps=1, kind="noop", map_version=0, workers=2,
                       moves=(),
                       effective_at=datetime.now(UTC), issued_at=datetime.now(UTC))
    rec = [ControlRecord("0:0", step.to_json())]
    kw = {"epoch": 1, "now": datetime.now(UTC), "job": "q4", "max_future_s": 60.0}
    mine = decide(initial_state(8, 2), rec, operator="avg", siblings=frozenset({"join"}), **kw)
    assert [e.action for e in mine.entries] == ["apply"]
    theirs = decide(initial_state(8, 2), rec, operator="join", siblings=frozenset({"avg"}), **kw)
    assert theirs.entries == [] and theirs.applied is None
    alone = decide(initial_state(8, 2), rec, operator="join", **kw)  # not a sibling: rejected, as before
    assert [e.action for e in alone.entries] == ["reject"]

