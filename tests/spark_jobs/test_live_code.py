"""spark_jobs.live_code without Spark: what makes a class unfit to be a version of the job's
processor (`judge_class`), the answers `LiveCode.check` gives before it ships or imports anything
(not a processor job, the version already in force, a label reused for another class), and the
versions a task loads (`chain`: none until an upgrade applied, then the whole history).

The processors are at module level so that `tests.spark_jobs.test_live_code:V1` names one; the
LiveCodes get `spark=None`, so a check that went on to ship or import would fail the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ballast.code_version import CodeVersion
from ballast.protocol import ControlStep
from spark_jobs.control_state import ControlState, initial_state
from spark_jobs.live_code import LiveCode, judge_class
from spark_jobs.operators import OPERATORS
from spark_jobs.processing import ProcessorOperator
from spark_jobs.processor import QuerySpec, StatefulProcessor, StatefulProcessorHandle, TimerValues, query
from tests.helpers.control import control_step

pytestmark = pytest.mark.dataplane
HERE = "tests.spark_jobs.test_live_code"
V1_REF, V2_REF = f"{HERE}:V1", f"{HERE}:V2"


class V1(StatefulProcessor):
    ballast_version = "1"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.count = handle.get_value_state("count")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        yield {"key": key[0]}


class V2(V1):
    ballast_version = "2"


class ByUser(V1):  # a version 2 that reads another query
    ballast_version = "2"
    ballast_query = QuerySpec(input_schema="user string", grouping_keys=("user",))


class NotAProcessor:
    ballast_version = "2"


def _upgrade(code: CodeVersion | None) -> ControlStep:
    import dataclasses

    return dataclasses.replace(control_step(plan="u", moves=()), kind="upgrade", code=code)


def _state(*code: CodeVersion) -> ControlState:
    st = initial_state(8, 2)
    st.code = list(code)
    return st


# ------------------------------------------------------------------ judge_class -------------------


def test_judge_class_accepts_a_processor_of_the_steps_version_and_the_jobs_query() -> None:
    assert judge_class(V2, CodeVersion(V2_REF, "2"), QuerySpec()) is None
    by_user = ProcessorOperator(ByUser).spec
    assert judge_class(query(V2, input_schema="user string", grouping_keys=("user",)), CodeVersion(V2_REF, "2"),
                       by_user) is None, "the same query, declared another way"


@pytest.mark.parametrize("cls", [NotAProcessor, 42, judge_class, None])
def test_judge_class_refuses_what_is_not_a_stateful_processor(cls: Any) -> None:
    why = judge_class(cls, CodeVersion("pkg.mod:Thing", "2"), QuerySpec())
    assert why is not None and why.startswith("pkg.mod:Thing is not a stateful processor")


def test_judge_class_refuses_a_class_that_says_another_version() -> None:
    why = judge_class(V1, CodeVersion(V1_REF, "2"), QuerySpec())
    assert why == (f"{V1_REF} says ballast_version '1', the step deploys version '2': is it the wrong build?")


def test_judge_class_refuses_a_version_that_changes_the_query() -> None:
    why = judge_class(ByUser, CodeVersion(f"{HERE}:ByUser", "2"), QuerySpec())
    assert why is not None and why.startswith(f"{HERE}:ByUser changes the query's input or keys")
    assert "start a new job for another query" in why
    assert judge_class(V2, CodeVersion(V2_REF, "2"), ProcessorOperator(ByUser).spec) is not None, "either way"


# ------------------------------------------------------------------ LiveCode.check, before Spark ---


def test_a_job_whose_operator_is_no_processor_takes_no_upgrade() -> None:
    live = LiveCode(spark=None, op=OPERATORS["keycount"](), path="keycount")
    assert live.base is None
    assert live.check(_upgrade(CodeVersion(V2_REF, "2")), _state()) == (
        "only a stateful processor upgrades live; this job runs KeyCount")
    assert live.chain(_state(CodeVersion(V2_REF, "2"))) == ()


def test_an_upgrade_step_without_code_is_answered_first() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    assert live.check(_upgrade(None), _state()) == "an upgrade step names the code it deploys (field 'code')"


def test_the_version_in_force_is_not_deployed_again() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    assert live.base == ("1", V1_REF)
    assert live.check(_upgrade(CodeVersion(V1_REF, "1")), _state()) == f"version 1 is already in force ({V1_REF})"
    after = _state(CodeVersion(V2_REF, "2"))
    assert live.check(_upgrade(CodeVersion("other.mod:Counter", "2")), after) == (
        f"version 2 is already in force ({V2_REF})"), "whatever class the step names"


def test_a_version_label_names_one_class_for_the_life_of_the_job() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    after = _state(CodeVersion(V2_REF, "2"))
    why = live.check(_upgrade(CodeVersion("other.mod:Counter", "1")), after)
    assert why == (f"version 1 was {V1_REF} in this job; a version label names one class for the life of a job "
                   "(give other.mod:Counter a label of its own)")
    rolled = _state(CodeVersion(V2_REF, "2"), CodeVersion(V1_REF, "1"))
    why = live.check(_upgrade(CodeVersion("other.mod:Counter2", "2")), rolled)
    assert why is not None and why.startswith(f"version 2 was {V2_REF} in this job"), "an upgrade's label too"


def test_chain_is_empty_until_an_upgrade_applied_then_the_whole_history() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    assert live.chain(_state()) == ()
    assert live.history(None) == [("1", V1_REF)] and live.history(_state()) == [("1", V1_REF)]
    assert live.chain(_state(CodeVersion(V2_REF, "2"))) == (("1", V1_REF), ("2", V2_REF))
    rolled = _state(CodeVersion(V2_REF, "2", ("/tmp/v2.py",)), CodeVersion(V1_REF, "1"))
    assert live.chain(rolled) == (("1", V1_REF), ("2", V2_REF), ("1", V1_REF))


def test_restore_has_nothing_to_ship_before_any_upgrade() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    live.restore(None)
    live.restore(_state())  # spark=None: shipping anything would raise
