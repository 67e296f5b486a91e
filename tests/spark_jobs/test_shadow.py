"""spark_jobs.shadow without Spark: a shadow upgrade's new version handles the call the task just made
with the version in force, on a copy of the key's state carried over by the job's version chain,
and its output rows are compared with the old version's as multisets (on the declared fields when
there are some). A difference, an exception of the new version, an upgrade function that raises
and an old version that raised where the new did not are each counted, with the first one as the
example; nothing the new version does reaches the stored state.

The versions count rows per key: V1 keeps the count in value state "n", every later version reads
it as "total" (StateUpgrade("1", "2") renames it), so a new version that was not handed the old
state carried over counts from zero and differs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from spark_jobs.key_state import KeyState
from spark_jobs.processing import ProcessorOperator
from spark_jobs.processor import ExpiredTimerInfo, StatefulProcessor, StatefulProcessorHandle, TimerValues
from spark_jobs.shadow import EXAMPLE_CHARS, Shadow
from spark_jobs.state_upgrade import StateUpgrade, chain_of

pytestmark = pytest.mark.dataplane

KEY = b'{"key":"a"}'
NOW_MS = 1_000


def _poison(v: tuple) -> tuple:
    raise ValueError(f"cannot convert {v}")


class V1(StatefulProcessor):
    ballast_version = "1"

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.n = handle.get_value_state("n")

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n = (self.n.get() or (0,))[0]
        for r in rows:
            n += r["add"]
            yield {"key": key[0], "count": n}
        self.n.update((n,))

    def handle_expired_timer(self, key: tuple, timer_values: TimerValues,
                             expired_timer_info: ExpiredTimerInfo) -> Iterator[Any]:
        yield {"key": key[0], "fired": expired_timer_info.getExpiryTimeInMs(),
               "count": (self.n.get() or (0,))[0]}


class V2(StatefulProcessor):
    """V1's outputs, its state renamed "total"."""

    ballast_version = "2"
    ballast_upgrades = (StateUpgrade("1", "2", rename={"n": "total"}),)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.total = handle.get_value_state("total")

    def count(self) -> int:
        return (self.total.get() or (0,))[0]

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        n = self.count()
        for r in rows:
            n += r["add"]
            yield {"key": key[0], "count": n}
        self.total.update((n,))

    def handle_expired_timer(self, key: tuple, timer_values: TimerValues,
                             expired_timer_info: ExpiredTimerInfo) -> Iterator[Any]:
        yield {"key": key[0], "fired": expired_timer_info.getExpiryTimeInMs(), "count": self.count()}


class OffByOne(V2):
    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        for row in super().handle_input_rows(key, rows, timer_values):
            yield {**row, "count": row["count"] + 1}


class WithExtra(V2):
    """V2's rows with one more field (when it was computed)."""

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        for row in super().handle_input_rows(key, rows, timer_values):
            yield {**row, "at": timer_values.getCurrentProcessingTimeInMs()}


class Raising(V2):
    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        raise KeyError("no such column")


class Reversed(V2):
    """V2's rows of a call in reverse order."""

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        return iter(list(super().handle_input_rows(key, rows, timer_values))[::-1])


class Doubled(V2):
    """V2's rows and its last row twice."""

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        out = list(super().handle_input_rows(key, rows, timer_values))
        return iter([*out, out[-1]])


class Spy(V2):
    """Records the state it was handed (what the carry-over made of V1's) and what it leaves."""

    handed: list[tuple[dict, str | None]] = []

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        ks = self.total._ks
        Spy.handed.append((dict(ks.values), ks.code))
        yield from super().handle_input_rows(key, rows, timer_values)


class PoisonedUpgrade(V2):
    ballast_upgrades = (StateUpgrade("1", "2", rename={"n": "total"}, values={"total": _poison}),)


def _shadow(new: type, fields: tuple[str, ...] = ()) -> Shadow:
    op = ProcessorOperator(new, chain=chain_of([("1", V1), ("2", new)]))
    return Shadow(op, "ProcessingTime", TimerValues(NOW_MS, -1), fields)


def _v1_state(n: int) -> bytes:
    """A key's stored state as V1 left it (no version tag: the job's first version)."""
    ks = KeyState()
    ks.values = {"n": ((n,), None)}
    ks.timers = {5_000}
    raw = ks.to_bytes()
    assert raw is not None
    return raw


def _rows(*adds: int) -> Any:
    """The handler call a task makes for key a's rows, as processing.run_processor makes it."""
    return lambda h: h.on_rows(("a",), iter([{"add": x} for x in adds]), h.tv)


def _old(raw: bytes | None, *adds: int) -> list[dict[str, Any]]:
    """V1's rows for the same call, as the task computed them (the `real` rows)."""
    h = StatefulProcessorHandle("ProcessingTime", TimerValues(NOW_MS, -1))
    h._current = KeyState(raw)
    proc = V1()
    proc.init(h)
    return list(proc.handle_input_rows(("a",), iter([{"add": x} for x in adds]), h.timer_values))


def _tally(sh: Shadow) -> tuple[int, int, int]:
    t = sh.tally()
    return t["calls"], t["differ"], t["errors"]


# ------------------------------------------------------------------ agree, differ ---------------


def test_a_new_version_that_agrees_counts_one_call_and_no_difference() -> None:
    raw = _v1_state(10)
    sh = _shadow(V2)
    assert sh.tally() == {"calls": 0, "differ": 0, "errors": 0, "example": ""}
    real = _old(raw, 1, 2)
    assert real == [{"key": "a", "count": 11}, {"key": "a", "count": 13}]
    sh.observe(KEY, raw, _rows(1, 2), real)
    assert sh.tally() == {"calls": 1, "differ": 0, "errors": 0, "example": ""}
    sh.observe(KEY, None, _rows(5), _old(None, 5))  # a key with no state yet
    assert _tally(sh) == (2, 0, 0)
    assert sh.handle._current is None, "the handle points at no key between calls"


def test_a_new_version_that_differs_is_counted_with_an_example_naming_the_key_and_both_rows() -> None:
    raw = _v1_state(10)
    sh = _shadow(OffByOne)
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(sh) == (1, 1, 0)
    assert sh.tally()["example"] == ('key {"key":"a"}: in force [{"count":11,"key":"a"}], '
                                     'new [{"count":12,"key":"a"}]')
    sh.observe(b'{"key":"b"}', raw, _rows(3), _old(raw, 3))
    assert _tally(sh) == (2, 2, 0)
    assert sh.tally()["example"].startswith('key {"key":"a"}'), "the first difference is the example"


def test_the_declared_fields_alone_are_compared() -> None:
    raw = _v1_state(10)
    whole = _shadow(WithExtra)
    whole.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(whole) == (1, 1, 0), "a field the old version does not write is a difference"
    assert '"at":1000' in whole.tally()["example"]
    some = _shadow(WithExtra, fields=("key", "count"))
    some.observe(KEY, raw, _rows(1, 2), _old(raw, 1, 2))
    assert some.tally() == {"calls": 1, "differ": 0, "errors": 0, "example": ""}
    wrong = _shadow(OffByOne, fields=("count",))
    wrong.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(wrong) == (1, 1, 0), "a difference in a declared field still counts"
    assert wrong.tally()["example"].endswith('in force [{"count":11}], new [{"count":12}]'), "as compared"


def test_the_rows_are_compared_as_multisets() -> None:
    raw = _v1_state(0)
    rev = _shadow(Reversed)
    rev.observe(KEY, raw, _rows(1, 2, 3), _old(raw, 1, 2, 3))
    assert _tally(rev) == (1, 0, 0), "the same rows in another order agree"
    dup = _shadow(Doubled)
    dup.observe(KEY, raw, _rows(1, 2), _old(raw, 1, 2))
    assert _tally(dup) == (1, 1, 0), "a row twice is not the same as once"
    none = _shadow(V2)
    none.observe(KEY, raw, _rows(), [])
    assert _tally(none) == (1, 0, 0), "no rows on either side agree"


def test_a_timer_call_is_compared_the_same_way() -> None:
    raw = _v1_state(7)
    sh = _shadow(V2)
    real = [{"key": "a", "fired": 5_000, "count": 7}]
    sh.observe(KEY, raw, lambda h: h.on_timer(("a",), h.tv, ExpiredTimerInfo(5_000)), real)
    assert _tally(sh) == (1, 0, 0)
    sh.observe(KEY, raw, lambda h: h.on_timer(("a",), h.tv, ExpiredTimerInfo(6_000)), real)
    assert _tally(sh) == (2, 1, 0)


# ------------------------------------------------------------------ errors ------------------------


def test_a_new_version_that_raises_is_a_call_and_an_error() -> None:
    raw = _v1_state(10)
    sh = _shadow(Raising)
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(sh) == (1, 0, 1)
    assert sh.tally()["example"] == """key {"key":"a"}: the new version raised KeyError: 'no such column'"""
    assert sh.handle._current is None, "the handle is let go of even when the handler raised"


def test_an_old_version_that_raised_where_the_new_did_not_is_a_difference() -> None:
    raw = _v1_state(10)
    sh = _shadow(V2)
    sh.observe(KEY, raw, _rows(1), None, "ValueError: poisoned")
    assert _tally(sh) == (1, 1, 0)
    assert sh.tally()["example"] == ('key {"key":"a"}: the version in force raised (ValueError: poisoned), '
                                     "the new one did not")
    both = _shadow(Raising)
    both.observe(KEY, raw, _rows(1), None, "ValueError: poisoned")
    assert _tally(both) == (1, 0, 1), "both raised: the new version's error, not a difference"


def test_an_upgrade_function_that_raises_is_an_error() -> None:
    raw = _v1_state(10)
    sh = _shadow(PoisonedUpgrade)
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(sh) == (1, 0, 1)
    example = sh.tally()["example"]
    assert example.startswith('key {"key":"a"}: the new version raised UpgradeFailed: ')
    assert "StateUpgrade('1', '2') raised ValueError: cannot convert (10,)" in example
    sh.observe(KEY, None, _rows(1), _old(None, 1))
    assert _tally(sh) == (2, 0, 1), "a key with no state has nothing to carry over"


def test_the_example_is_bounded() -> None:
    sh = _shadow(V2)
    long_key = json.dumps({"key": "k" * 500}).encode()
    sh.observe(long_key, None, _rows(*range(50)), None, "E" * 1_000)
    assert _tally(sh) == (1, 1, 0)
    example = sh.tally()["example"]
    assert len(example) == EXAMPLE_CHARS
    assert example == ("key " + long_key.decode()[:80] + ": the version in force raised (" + "E" * 1_000)[:300], (
        "the key cut to 80 characters, the whole to EXAMPLE_CHARS")
    rows = _shadow(OffByOne)
    rows.observe(KEY, None, _rows(*range(50)), _old(None, *range(50)))
    example = rows.tally()["example"]
    assert example.endswith(", ...]") and len(example) < EXAMPLE_CHARS, "each side shows its first rows, cut"


# ------------------------------------------------------------------ the state it is given -----------


def test_the_new_version_gets_the_old_state_carried_over_on_a_copy() -> None:
    raw = _v1_state(10)
    Spy.handed.clear()
    sh = _shadow(Spy)
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(sh) == (2, 0, 0), "both calls start from the stored state, not from the shadow's last one"
    assert Spy.handed == [({"total": ((10,), None)}, "2")] * 2, "V1's 'n' renamed, tagged with the new version"
    back = KeyState(raw)
    assert back.values == {"n": ((10,), None)} and back.code is None and back.timers == {5_000}, (
        "the stored state is as V1 left it")


def test_without_a_chain_the_state_is_handed_over_as_it_is() -> None:
    """A shadow needs the job's chain to carry state over: without one, V2 reads no 'total' and differs."""
    raw = _v1_state(10)
    sh = Shadow(ProcessorOperator(V2), "ProcessingTime", TimerValues(NOW_MS, -1), ())
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(sh) == (1, 1, 0)
    assert sh.tally()["example"].endswith('new [{"count":1,"key":"a"}]')


class Unwritable(V2):
    """V2's rows with a value no output can hold (JSON keys are strings)."""

    def handle_input_rows(self, key: tuple, rows: Iterator[Any], timer_values: TimerValues) -> Iterator[Any]:
        for row in super().handle_input_rows(key, rows, timer_values):
            yield {**row, "by_pair": {(1, 2): 3}}


def test_a_new_version_whose_row_cannot_be_written_is_an_error_not_a_failed_task() -> None:
    raw = _v1_state(10)
    sh = _shadow(Unwritable)
    sh.observe(KEY, raw, _rows(1), _old(raw, 1))
    assert _tally(sh) == (1, 0, 1)
    assert "TypeError" in sh.tally()["example"]
