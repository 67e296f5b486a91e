"""spark_jobs.live_code without Spark: what makes a class unfit to be a version of the job's
processor (`judge_class`), the answers `LiveCode.check` gives before it ships or imports anything
(not a processor job, the version already in force, a label reused for another class), and the
versions a task loads (`chain`: none until an upgrade applied, then the whole history; `shadow_chain`:
the history with a shadow upgrade's version last), and the shadow tallies of the workers added up
until the decision takes them (`observe`, `take_seen`).

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
from spark_jobs.processor import (
    QuerySpec,
    StatefulProcessor,
    StatefulProcessorHandle,
    StateUpgrade,
    TimerValues,
    query,
)
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


class V3(V1):  # a version that says how version 1's state carries over
    ballast_version = "3"
    ballast_upgrades = (StateUpgrade("1", "3"),)


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


# ------------------------------------------------------------------ shadow upgrades ---------------


def _tallies(*ts: tuple[int, int, int, str]) -> list[dict[str, Any]]:
    """The workers' metrics docs of an epoch, each with its task's shadow tally."""
    return [{"worker": i, "shadow": {"calls": c, "differ": d, "errors": e, "example": x}}
            for i, (c, d, e, x) in enumerate(ts)]


SHADOW = {"step": "u#1", "code": {"ref": V2_REF, "version": "2", "shadow": {"epochs": 2, "tolerance": 0.0}},
          "fields": []}


def test_observe_adds_the_workers_tallies_up_until_the_decision_takes_them() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    assert live.take_seen() == {}
    live.observe(SHADOW, _tallies((3, 0, 0, ""), (2, 1, 0, "key a: differs"), (2, 0, 2, "key b: raised")), 5)
    live.observe(SHADOW, [{"worker": 0}, {"worker": 1, "shadow": None},
                          {"worker": 2, "shadow": {"calls": 4, "differ": 2, "errors": 1, "example": "key c"}}], 6)
    assert live.take_seen() == {"u#1": {"calls": 11, "differ": 3, "errors": 3, "epochs": 2,
                                        "example": "key a: differs"}}
    assert live.take_seen() == {}, "once"
    live.observe(SHADOW, _tallies((1, 0, 0, ""), (0, 0, 0, "")), 7)
    assert live.take_seen() == {"u#1": {"calls": 1, "differ": 0, "errors": 0, "epochs": 1, "example": ""}}


def test_an_epoch_run_again_replaces_its_tally_instead_of_adding_it() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    live.observe(SHADOW, _tallies((3, 1, 0, "first try")), 5)
    live.observe(SHADOW, _tallies((3, 1, 0, "again")), 5)  # Spark ran the epoch again before the next decision
    assert live.take_seen() == {"u#1": {"calls": 3, "differ": 1, "errors": 0, "epochs": 1, "example": "again"}}


def test_observe_ignores_an_epoch_without_a_shadow() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    live.observe(None, _tallies((3, 1, 0, "x")))
    live.observe({}, _tallies((3, 1, 0, "x")))
    assert live.take_seen() == {}
    live.observe(SHADOW, [])
    assert live.take_seen() == {"u#1": {"calls": 0, "differ": 0, "errors": 0, "epochs": 0, "example": ""}}, (
        "an epoch whose tasks compared nothing (the decision counts no epoch for it)")


def test_observe_keeps_each_steps_tally_apart() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    live.observe(SHADOW, _tallies((1, 0, 0, "")))
    live.observe({**SHADOW, "step": "v#1"}, _tallies((5, 5, 0, "v's")))
    assert live.take_seen() == {"u#1": {"calls": 1, "differ": 0, "errors": 0, "epochs": 1, "example": ""},
                                "v#1": {"calls": 5, "differ": 5, "errors": 0, "epochs": 1, "example": "v's"}}


def test_shadow_chain_is_the_history_with_the_version_tried_last() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    assert live.shadow_chain(_state(), None) == () and live.shadow_chain(_state(), {}) == ()
    assert live.shadow_chain(_state(), SHADOW) == (("1", V1_REF), ("2", V2_REF))
    assert live.chain(_state()) == (), "the version in force is still the command line's"
    after = _state(CodeVersion(V2_REF, "2"))
    tried = {**SHADOW, "code": CodeVersion("pkg.mod:Counter3", "3").to_dict()}
    assert live.shadow_chain(after, tried) == (("1", V1_REF), ("2", V2_REF), ("3", "pkg.mod:Counter3"))
    keycount = LiveCode(spark=None, op=OPERATORS["keycount"](), path="keycount")
    assert keycount.shadow_chain(_state(), SHADOW) == (), "no processor, nothing to try"


def _answered(live: LiveCode, step: ControlStep, st: ControlState) -> str | None:
    """What `check` says once its thread is done with the driver's half (it answers PENDING until then)."""
    import time

    from spark_jobs.control import CODE_CHECK_PENDING

    for _ in range(200):
        got = live.check(step, st)
        if got != CODE_CHECK_PENDING or live.probing:
            return got
        time.sleep(0.01)
    raise AssertionError("the driver's half of the check never answered")


def test_a_version_the_driver_accepts_is_imported_by_the_next_epochs_tasks_before_it_goes_in() -> None:
    from spark_jobs.control import CODE_CHECK_PENDING

    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    step, st = _upgrade(CodeVersion(f"{HERE}:V3", "3")), _state()
    assert not live.probing and live.probe_chain() == ()
    assert _answered(live, step, st) == CODE_CHECK_PENDING and live.probing, "the executors' half is still to come"
    assert live.probe_chain() == (("1", V1_REF), ("3", f"{HERE}:V3")), "the tasks load every version"
    live.observe(None, [{"worker": 0, "records_in": 4}])  # an epoch without the probe's answers: still waiting
    assert live.check(step, st) == CODE_CHECK_PENDING and live.probing
    live.observe(None, [{"worker": 0, "probe": ""}, {"worker": 1, "probe": ""}])
    assert live.check(step, st) is None and not live.probing and live.probe_chain() == ()


def test_a_version_one_task_cannot_import_is_refused_naming_the_executor() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    step, st = _upgrade(CodeVersion(f"{HERE}:V3", "3")), _state()
    _answered(live, step, st)
    live.observe(None, [{"worker": 0, "probe": "", "host": "h1", "pid": 7},
                        {"worker": 1, "probe": "ModuleNotFoundError: No module named 'x'", "host": "h2", "pid": 9}])
    why = live.check(step, st)
    assert why == (f"version 3 ({HERE}:V3) does not import on executor h2:9: "
                   "ModuleNotFoundError: No module named 'x'") and not live.probing


def test_the_drivers_half_refuses_without_asking_the_tasks() -> None:
    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    st = _state()
    assert "StateUpgrade('1', '2')" in (_answered(live, _upgrade(CodeVersion(V2_REF, "2")), st) or "")
    assert "does not import on the driver" in (_answered(live, _upgrade(CodeVersion("no_such_mod_x:C", "4")), st)
                                               or "")
    assert not live.probing


def test_a_new_plan_with_the_same_code_is_checked_again() -> None:
    """A refusal belongs to its step: once the operator fixed what was wrong (a file, a module), a new
    plan with the same code is judged afresh, not answered from the first one's refusal."""
    import dataclasses
    import sys
    import types

    live = LiveCode(spark=None, op=ProcessorOperator(V1), path=V1_REF)
    st = _state()
    first = _upgrade(CodeVersion("late_module_x:V3", "3"))
    assert "does not import on the driver" in (_answered(live, first, st) or "")
    sys.modules["late_module_x"] = types.SimpleNamespace(V3=V3)  # type: ignore[assignment]  # now it imports
    try:
        again = dataclasses.replace(first, plan_id="u2")
        from spark_jobs.control import CODE_CHECK_PENDING

        assert _answered(live, again, st) == CODE_CHECK_PENDING and live.probing
        assert "does not import" in (live.check(first, st) or ""), "the first step keeps its answer"
    finally:
        del sys.modules["late_module_x"]
