"""The identity comparison of spark_jobs.binding: checkpoint <-> store <-> metrics DB job row, and the
job row's declared window (what the control plane chooses a handover by).

Pure rules, one case each; the same refusals on a real job are in tests/system/test_state_binding.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from spark_jobs.binding import (
    Expected,
    behind_problem,
    db_problem,
    key_schema,
    problems,
    same_location,
)
from spark_jobs.operators import KeyCount, WordCount
from spark_jobs.processing import ProcessorOperator
from spark_jobs.processor import QuerySpec

WANT = Expected(job="j", operator="keycount", bins=16, key_schema="kafka-key", checkpoint="/c/ckpt",
                state_uri="/c/state")
BINDING = {"checkpoint_id": "C1", "store_id": "S1", "state_uri": "/c/state", "job": "j", "operator": "keycount",
           "bins": 16, "key_schema": "kafka-key"}
STORE = {"job": "j", "bins": 16, "store_id": "S1", "operator": "keycount", "key_schema": "kafka-key",
         "checkpoint_id": "C1", "checkpoint": "/c/ckpt"}


def test_matching_sides_and_a_new_job_pass() -> None:
    assert problems(WANT, BINDING, STORE, committed=7) == []
    assert problems(WANT, None, None, committed=-1) == [], "a new job binds at its first start"
    assert problems(WANT, BINDING, None, committed=-1) == [], "a first start that stopped before its first epoch"


def test_another_location_names_both_and_the_command() -> None:
    [msg] = problems(replace(WANT, state_uri="/c/statx"), BINDING, None, committed=7)
    assert "at /c/state," in msg and "for /c/statx" in msg and "--state-uri /c/state" in msg
    assert "spark_jobs.relocate" in msg


def test_same_location_however_written() -> None:
    assert same_location("/c/state", "/c/state/") and same_location("/c/./state", "file:///c/state")
    assert not same_location("/c/state", "/c/statex")


def test_an_empty_store_under_a_checkpoint_with_epochs_is_refused() -> None:
    [msg] = problems(WANT, BINDING, None, committed=3)
    assert "empty store" in msg and "up to 3" in msg and "S1" in msg and "/c/state" in msg
    [legacy] = problems(WANT, None, None, committed=3)  # a checkpoint from before bindings
    assert "empty store" in legacy


def test_another_jobs_store() -> None:
    [msg] = problems(WANT, BINDING, {**STORE, "job": "other", "checkpoint": "/o/ckpt"}, committed=3)
    assert "another job's store" in msg and "'other'" in msg and "'j'" in msg and "/o/ckpt" in msg


def test_another_store_of_the_same_job() -> None:
    [msg] = problems(WANT, BINDING, {**STORE, "store_id": "S2", "checkpoint_id": "C2"}, committed=3)
    assert "another store" in msg and "S1" in msg and "S2" in msg


def test_a_new_checkpoint_cannot_take_over_a_bound_store() -> None:
    [msg] = problems(WANT, None, STORE, committed=-1)
    assert "another checkpoint's store" in msg and "C1" in msg and "a new checkpoint" in msg


def test_a_store_from_before_bindings_is_adopted() -> None:
    legacy = {"job": "j", "bins": 16, "store_id": "S0"}
    assert problems(WANT, None, legacy, committed=5) == []


@pytest.mark.parametrize(("field", "value"), [("bins", 32), ("operator", "wordcount"), ("key_schema", "grouping")])
def test_a_changed_fixed_setting_is_refused(field: str, value: Any) -> None:
    msgs = problems(replace(WANT, **{field: value}), BINDING, STORE, committed=3)
    assert msgs and all(field in m and repr(value) in m for m in msgs)
    assert problems(replace(WANT, **{field: value}), None, {**STORE, "checkpoint_id": None}, committed=3)


def test_an_unfinished_relocation_refuses_every_start() -> None:
    [msg] = problems(WANT, BINDING, STORE, committed=3, relocation={"from": "/c/state", "to": "/n/state"})
    assert "unfinished" in msg and "/n/state" in msg and "spark_jobs.relocate" in msg


def test_behind_and_not_behind() -> None:
    msg = behind_problem("/c/state", store_last=4, input_epoch=9)
    assert msg is not None and "epoch 9" in msg and "epoch 4" in msg
    assert behind_problem("/c/state", 9, 9) is None and behind_problem("/c/state", 10, 9) is None
    assert behind_problem("/c/state", -1, None) is None, "no epoch with input: nothing to miss"
    assert behind_problem("/c/state", 2, 9, retained_from=12) is None, "retention dropped those manifests"


def test_the_metrics_db_row_of_another_deployment() -> None:
    ids = {"checkpoint_id": "C1", "store_id": "S1"}
    theirs = {"binding": {"checkpoint_id": "C9", "store_id": "S9"}, "checkpoint_dir": "/o/ckpt", "state_uri": "/o/st"}
    msg = db_problem(WANT, ids, theirs)
    assert msg is not None and "C9" in msg and "C1" in msg and "/o/ckpt" in msg and "job name" in msg
    assert db_problem(WANT, ids, {"binding": ids}) is None
    assert db_problem(WANT, ids, None) is None and db_problem(WANT, ids, {"checkpoint_dir": "/x"}) is None


def test_key_schema_of_operators_and_processors() -> None:
    assert key_schema(KeyCount()) == "kafka-key"
    assert key_schema(WordCount()) == "keyed:spark_jobs.operators.WordCount"

    class ByUser:
        ballast_query = QuerySpec(grouping_keys=("user",))

    class ByUserAndRegion:
        ballast_query = QuerySpec(grouping_keys=("user", "region"))

    assert key_schema(ProcessorOperator(ByUser)) != key_schema(ProcessorOperator(ByUserAndRegion))

    class Declared(KeyCount):
        key_schema = "v2"

    assert key_schema(Declared()) == "v2"


def test_the_job_row_carries_the_operators_declared_window() -> None:
    from ballast.policy.handover import WindowSpec
    from ballast.policy.movemodes import DeclaredWindow
    from spark_jobs.binding import window_config

    class Sliding:
        ballast_query = QuerySpec(grouping_keys=("user",), time_mode="EventTime", event_time_column="ts",
                                  lateness_ms=5_000, window=WindowSpec(10_000, 5_000))

    class Unwindowed:
        ballast_query = QuerySpec(grouping_keys=("user",), time_mode="EventTime", event_time_column="ts")

    doc = window_config(ProcessorOperator(Sliding))
    assert doc == {"length_ms": 10_000, "slide_ms": 5_000, "offset_ms": 0, "gap_ms": None, "staggered": False,
                   "lateness_ms": 5_000}
    assert DeclaredWindow.from_config(doc) == DeclaredWindow(WindowSpec(10_000, 5_000), 5_000), "the control plane's"
    assert window_config(ProcessorOperator(Unwindowed)) is None and window_config(KeyCount()) is None
    assert window_config(None) is None
