"""spark_jobs.operator_loader: a shipped name, or an import path to an Operator subclass, a stateful
processor (Ballast's or Spark's) or a StatelessQuery, gives the operator the workers run; anything
else stops with a message saying what was expected."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from spark_jobs.operator_loader import get_operator, live_operator
from spark_jobs.operators import KeyCount, WordCount
from spark_jobs.processing import ProcessorOperator
from spark_jobs.processor import StatefulProcessor, is_processor
from spark_jobs.state_upgrade import StateUpgrade
from spark_jobs.stateless import StatelessOperator

pytestmark = pytest.mark.dataplane
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "operators"))


class _Bad:
    pass


class _Counter1(StatefulProcessor):
    ballast_version = "1"


class _Counter2(StatefulProcessor):
    ballast_version = "2"
    ballast_upgrades = (StateUpgrade("1", "2"), StateUpgrade("2", "1"))


def test_user_operator_by_import_path_and_clear_errors():
    assert isinstance(get_operator("spark_jobs.operators:KeyCount"), KeyCount)
    with pytest.raises(ValueError, match="does not import"):
        get_operator("no_such_module:Op")
    with pytest.raises(ValueError, match="does not import"):
        get_operator("spark_jobs.operators:Nope")
    with pytest.raises(ValueError, match="not a subclass"):
        get_operator("spark_jobs.bins:MASK64")
    with pytest.raises(ValueError, match="unknown operator"):
        get_operator("nope")
    with pytest.raises(ValueError, match="cannot be instantiated"):  # abstract: fold not implemented
        get_operator("spark_jobs.operators:Operator")


def test_operator_by_import_path_accepts_processors_with_clear_errors():
    op = get_operator("window_counts:WindowCounts")
    assert isinstance(op, ProcessorOperator) and op.spec.time_mode == "EventTime" and op.spec.grouping_keys == ("user",)
    assert isinstance(get_operator("window_counts:WindowCountsProcessor"), ProcessorOperator)  # Spark's, as is
    with pytest.raises(ValueError, match="does not import"):
        get_operator("window_counts:Nope")
    with pytest.raises(ValueError, match="does not import"):
        get_operator("no_such_pkg.mod:Proc")
    with pytest.raises(ValueError, match="nor a stateful processor"):
        get_operator("test_operator_loader:_Bad")
    with pytest.raises(ValueError, match="package.module:Class"):
        get_operator("window_counts:")
    assert is_processor(StatefulProcessor) and not is_processor(_Bad) and not is_processor(42)


def test_the_loader_runs_a_declared_stateless_query():
    op = get_operator("spark_jobs.nexmark.stateless:Q1")
    assert isinstance(op, StatelessOperator) and op.key_schema == "stateless"


def test_shipped_names_give_a_fresh_operator_each_time():
    assert type(get_operator("keycount")) is KeyCount and type(get_operator("wordcount")) is WordCount
    assert get_operator("keycount") is not get_operator("keycount")
    with pytest.raises(ValueError, match=r"known: \['keycount', 'wordcount'\], or package.module:Class"):
        get_operator("KeyCount")  # names are exact


# ------------------------------------------------------------------ live upgrades -----------------
C1, C2 = "test_operator_loader:_Counter1", "test_operator_loader:_Counter2"


def test_without_upgrades_a_task_runs_the_named_operator():
    assert type(live_operator("keycount", ())) is KeyCount and type(live_operator("wordcount")) is WordCount
    op = live_operator(C1, ())
    assert isinstance(op, ProcessorOperator) and op.cls is _Counter1 and op.chain is None


def test_after_upgrades_a_task_runs_the_last_version_with_every_version_loaded():
    op = live_operator(C1, (("1", C1), ("2", C2)))
    assert isinstance(op, ProcessorOperator) and op.cls is _Counter2
    assert op.chain is not None and op.chain.entries == (("1", _Counter1), ("2", _Counter2))
    assert op.chain.tag() == "2"
    back = live_operator(C1, (("1", C1), ("2", C2), ("1", C1)))  # rolled back
    assert isinstance(back, ProcessorOperator) and back.cls is _Counter1
    assert back.chain is not None and [v for v, _ in back.chain.entries] == ["1", "2", "1"] and back.chain.tag() is None
    assert isinstance(live_operator("keycount", (("1", C1), ("2", C2))), ProcessorOperator), "the chain decides"


def test_a_version_that_is_no_processor_or_does_not_import_stops_the_task_with_why():
    with pytest.raises(ValueError, match=r"version 2 \(spark_jobs.operators:KeyCount\) is not a stateful processor"):
        live_operator(C1, (("1", C1), ("2", "spark_jobs.operators:KeyCount")))
    with pytest.raises(ValueError, match=r"version 1 \(test_operator_loader:_Bad\) is not a stateful processor"):
        live_operator(C1, (("1", "test_operator_loader:_Bad"), ("2", C2)))
    with pytest.raises(ValueError, match="does not import"):
        live_operator(C1, (("1", C1), ("2", "no_such_module:Counter")))


def test_a_tasks_probe_answers_instead_of_raising() -> None:
    from spark_jobs.operator_loader import probe

    assert probe("keycount", ()) == ""
    assert probe("keycount", (("1", "tests.system.upgrade_counter:Counter"),)) == ""
    why = probe("keycount", (("1", "tests.system.upgrade_counter:Counter"), ("2", "no_such_module_x:Counter")))
    assert why.startswith("ValueError: operator 'no_such_module_x:Counter' does not import")
