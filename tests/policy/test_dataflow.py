"""ballast.policy.dataflow: a job's dataflow is a DAG of operators fed by sources; its topological
order is deterministic (declaration order breaks ties), and a cycle, an unknown input or a
duplicate name is refused; a source's target rate adds the catch-up of its backlog."""

from __future__ import annotations

import pytest

from ballast.policy.dataflow import Dataflow, OperatorNode, SourceLoad

pytestmark = pytest.mark.controlplane


def test_topological_order_checks_the_dag() -> None:
    flow = Dataflow(("s",), (OperatorNode("b", ("a",), 1), OperatorNode("a", ("s",), 1)))
    assert [o.name for o in flow.topological_order()] == ["a", "b"]
    with pytest.raises(ValueError, match="cycle"):
        Dataflow(("s",), (OperatorNode("a", ("b",), 1), OperatorNode("b", ("a",), 1))).topological_order()
    with pytest.raises(ValueError, match="unknown"):
        Dataflow(("s",), (OperatorNode("a", ("x",), 1),)).topological_order()



def test_a_chain_links_each_operator_to_the_one_before() -> None:
    flow = Dataflow.chain("src", [("split", 2), ("count", 4)])
    assert flow.sources == ("src",)
    assert flow.operators == (OperatorNode("split", ("src",), 2), OperatorNode("count", ("split",), 4))
    assert flow.node("count").parallelism == 4 and flow.node("split").adjustable
    with pytest.raises(KeyError):
        flow.node("join")
    assert Dataflow.chain("src", []).topological_order() == []


def test_ties_are_broken_in_declaration_order() -> None:
    flow = Dataflow(("s", "t"), (OperatorNode("join", ("b", "a"), 1), OperatorNode("b", ("t",), 1),
                                 OperatorNode("a", ("s",), 1)))
    assert [o.name for o in flow.topological_order()] == ["b", "a", "join"]


@pytest.mark.parametrize("flow", [
    Dataflow(("s",), (OperatorNode("a", ("s",), 1), OperatorNode("a", ("s",), 2))),
    Dataflow(("s",), (OperatorNode("s", ("s",), 1),)),
])
def test_duplicate_names_are_refused(flow: Dataflow) -> None:
    with pytest.raises(ValueError, match="operator and source names must be unique"):
        flow.topological_order()


def test_the_target_rate_drains_the_backlog_within_the_catch_up_time() -> None:
    assert SourceLoad(1000.0, 6000.0).target_rate(60.0) == pytest.approx(1100.0)
    assert SourceLoad(1000.0).target_rate(60.0) == pytest.approx(1000.0)
    assert SourceLoad(1000.0, 6000.0).target_rate(0.0) == pytest.approx(1000.0)  # no catch-up asked
