"""spark_jobs.key_state: a key's values, lists, maps and timers survive the bytes its bin stores
and a move carries; TTLs expire at processing time; equal state gives equal bytes whatever the
order it was written in (replays are byte-identical)."""

from __future__ import annotations

import pytest

from spark_jobs.key_state import KeyState
from spark_jobs.processor import TimerValues
from tests.helpers.processor_key import handle_on_key

pytestmark = pytest.mark.dataplane


def test_value_list_map_state_and_roundtrip():
    h, ks = handle_on_key(1000)
    v, lst = h.get_value_state("v", "x long"), h.getListState("l", "x long")
    mp = h.get_map_state("m", "k string", "x long")
    assert not v.exists() and v.get() is None and not lst.exists() and list(mp.keys()) == []
    v.update((1,))
    lst.put([(1,), (2,)])
    lst.appendValue((3,))
    lst.append_list([(4,)])
    mp.updateValue(("a",), (10,))
    mp.update_value(("b",), (20,))
    mp.remove_key(("a",))
    h.register_timer(5000)
    h.registerTimer(7000)
    h.deleteTimer(7000)
    assert v.get() == (1,) and list(lst.get()) == [(1,), (2,), (3,), (4,)]
    assert mp.containsKey(("b",)) and not mp.contains_key(("a",)) and list(mp.iterator()) == [(("b",), (20,))]
    assert list(h.listTimers()) == [5000]
    again = KeyState(ks.to_bytes())  # what the bin stores and a move carries
    assert again.values == ks.values and again.lists == ks.lists and again.maps == ks.maps and again.timers == {5000}
    assert again.same(ks) and not again.same(KeyState())
    v.clear(), lst.clear(), mp.clear(), h.delete_timer(5000)
    assert ks.empty() and ks.to_bytes() is None  # nothing left: the key's entry is deleted
    with pytest.raises(ValueError, match="already a value state"):
        h.get_list_state("v", "x long")


def test_ttl_expires_values_at_processing_time():
    h, ks = handle_on_key(1000)
    v = h.get_value_state("v", "x long", ttl_duration_ms=500)
    lst = h.get_list_state("l", "x long", ttl_duration_ms=500)
    keep = h.get_value_state("keep", "x long")
    v.update((1,))
    lst.append_value((1,))
    keep.update((9,))
    assert ks.next_expiry() == 1500
    h.timer_values = TimerValues(1200, 0)
    lst.append_value((2,))  # expires at 1700; an update resets only what it writes
    h.timer_values = TimerValues(1500, 0)
    assert v.get() is None and not v.exists() and list(lst.get()) == [(2,)] and keep.get() == (9,)
    ks.compact(1500)
    assert "v" not in ks.values and ks.lists["l"] == [((2,), 1700)] and ks.next_expiry() == 1700
    with pytest.raises(ValueError, match="positive int"):
        h.get_value_state("bad", "x long", ttl_duration_ms=0)


def test_equal_state_written_in_another_order_gives_the_same_bytes():
    a, ka = handle_on_key(0)
    b, kb = handle_on_key(0)
    for name, x in (("v1", 1), ("v2", 2)):
        a.get_value_state(name, "x long").update((x,))
    for name, x in (("v2", 2), ("v1", 1)):
        b.get_value_state(name, "x long").update((x,))
    for key in (("k1",), ("k2",)):
        a.get_map_state("m", "k string", "x long").update_value(key, (0,))
    for key in (("k2",), ("k1",)):
        b.get_map_state("m", "k string", "x long").update_value(key, (0,))
    a.register_timer(7), a.register_timer(3)
    b.register_timer(3), b.register_timer(7)
    assert ka.to_bytes() == kb.to_bytes() and KeyState(ka.to_bytes()).same(kb)


def _some_state(code: str | None) -> KeyState:
    ks = KeyState()
    ks.values = {"b": ((2,), None), "a": ((1,), 1500)}
    ks.lists = {"l": [((1,), None), ((2,), 700)]}
    ks.maps = {"m": {("y",): ((2,), None), ("x",): ((1,), None)}}
    ks.timers = {9, 3}
    ks.code = code
    return ks


def test_the_version_that_wrote_a_key_survives_its_bytes():
    ks = _some_state("2")
    again = KeyState(ks.to_bytes())
    assert again.code == "2" and again.same(ks)
    assert KeyState().code is None and KeyState(_some_state(None).to_bytes()).code is None


def test_a_key_of_the_first_version_is_stored_as_before_the_tag_existed():
    import pickle

    # to_bytes' layout before KeyState.code: each part sorted, no "c" entry
    before = {"v": {"a": ((1,), 1500), "b": ((2,), None)}, "l": {"l": [((1,), None), ((2,), 700)]},
              "m": {"m": {("x",): ((1,), None), ("y",): ((2,), None)}}, "t": [3, 9]}
    assert _some_state(None).to_bytes() == pickle.dumps(before, protocol=5)
    assert _some_state("2").to_bytes() == pickle.dumps({**before, "c": "2"}, protocol=5)
    assert KeyState(pickle.dumps(before, protocol=5)).same(_some_state(None)), "an old key reads as untagged"


def test_same_tells_keys_apart_by_the_version_that_wrote_them():
    assert _some_state("2").same(_some_state("2")) and _some_state(None).same(_some_state(None))
    assert not _some_state("2").same(_some_state(None)) and not _some_state("2").same(_some_state("3"))
