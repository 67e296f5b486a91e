"""spark_jobs.state_upgrade: a StateUpgrade renames, drops and converts a key's state variables in
place and keeps their TTLs; the upgrade between two versions is found on the newer class first; a
VersionChain carries a key's state hop by hop from the version that wrote it (its tag) to the one
in force, backwards too after a rollback, and says which hop is missing or failed. Fast: no Spark."""

from __future__ import annotations

from typing import Any

import pytest

from spark_jobs.key_state import KeyState
from spark_jobs.processor import StatefulProcessor
from spark_jobs.state_upgrade import (
    DEFAULT_VERSION,
    StateUpgrade,
    UpgradeFailed,
    chain_of,
    find_upgrade,
    version_of,
)

pytestmark = pytest.mark.dataplane


def _poison(v: tuple) -> tuple:
    raise ValueError(f"cannot convert {v}")


# A count per key. v1 keeps (n,) in value state "n"; v2 renames it "count" and adds a field (n, 0),
# and declares the way back; v3 renames it "total" and multiplies n by 10; Poisoned3 is a v3 whose
# conversion raises; Lone9 declares nothing.
class V1(StatefulProcessor):
    ballast_version = "1"


class V2(StatefulProcessor):
    ballast_version = "2"
    ballast_upgrades = (
        StateUpgrade("1", "2", rename={"n": "count"}, values={"count": lambda v: (*v, 0)}),
        StateUpgrade("2", "1", rename={"count": "n"}, values={"n": lambda v: v[:1]}),
    )


class V3(StatefulProcessor):
    ballast_version = "3"
    ballast_upgrades = (
        StateUpgrade("2", "3", rename={"count": "total"}, values={"total": lambda v: (v[0] * 10, v[1])}),
    )


class Poisoned3(StatefulProcessor):
    ballast_version = "3"
    ballast_upgrades = (StateUpgrade("2", "3", rename={"count": "total"}, values={"total": _poison}),)


class Lone9(StatefulProcessor):
    ballast_version = "9"


def _counted(n: int, expiry: int | None = None, code: str | None = None) -> KeyState:
    """A key as v1 (or the version `code` says) left it: value state "n", a list and a timer."""
    ks = KeyState()
    ks.values = {"n": ((n,), expiry)}
    ks.lists = {"seen": [(("a",), None)]}
    ks.timers = {5000}
    ks.code = code
    return ks


# ------------------------------------------------------------------ StateUpgrade.apply -------------


def test_rename_and_drop_move_every_kind_of_state_and_keep_the_rest_and_the_ttls() -> None:
    ks = KeyState()
    ks.values = {"old": ((1,), 700), "gone": ((2,), None), "kept": ((3,), 900)}
    ks.lists = {"old_list": [((1,), 100), ((2,), None)], "gone_list": [((0,), None)]}
    ks.maps = {"old_map": {("k",): ((1,), 50)}, "gone": {("x",): ((0,), None)}}
    ks.timers = {10, 20}
    StateUpgrade("1", "2", rename={"old": "new", "old_list": "new_list", "old_map": "new_map"},
                 drop=("gone", "gone_list")).apply(ks)
    assert ks.values == {"new": ((1,), 700), "kept": ((3,), 900)}
    assert ks.lists == {"new_list": [((1,), 100), ((2,), None)]}
    assert ks.maps == {"new_map": {("k",): ((1,), 50)}}, "a dropped name goes from every kind of state"
    assert ks.timers == {10, 20} and ks.code is None, "timers and the tag are not the upgrade's business"


def test_a_values_function_converts_a_value_each_list_element_and_each_map_value_keeping_ttls() -> None:
    ks = KeyState()
    ks.values = {"v": ((1,), 700), "other": ((9,), None)}
    ks.lists = {"l": [((1,), 100), ((2,), None)]}
    ks.maps = {"m": {("a",): ((1,), 50), ("b",): ((2,), None)}}
    add0 = {"v": lambda v: (*v, 0), "l": lambda v: (*v, 0), "m": lambda v: (v[0] * 2,)}
    StateUpgrade("1", "2", values=add0).apply(ks)
    assert ks.values == {"v": ((1, 0), 700), "other": ((9,), None)}, "a variable not named is left as it is"
    assert ks.lists == {"l": [((1, 0), 100), ((2, 0), None)]}
    assert ks.maps == {"m": {("a",): ((2,), 50), ("b",): ((4,), None)}}


def test_a_values_function_is_keyed_by_the_new_name() -> None:
    ks = KeyState()
    ks.values = {"n": ((1,), None)}
    StateUpgrade("1", "2", rename={"n": "count"}, values={"count": lambda v: (*v, 0)}).apply(ks)
    assert ks.values == {"count": ((1, 0), None)}
    ks2 = KeyState()
    ks2.values = {"n": ((1,), None)}
    StateUpgrade("1", "2", rename={"n": "count"}, values={"n": lambda v: (*v, 0)}).apply(ks2)
    assert ks2.values == {"count": ((1,), None)}, "the old name matches nothing once renamed"


def test_map_keys_converts_the_user_keys_of_a_map_and_keeps_their_values() -> None:
    ks = KeyState()
    ks.maps = {"m": {("a",): ((1,), 50), ("b",): ((2,), None)}, "other": {("a",): ((3,), None)}}
    StateUpgrade("1", "2", map_keys={"m": lambda k: (k[0].upper(), 0)}).apply(ks)
    assert ks.maps == {"m": {("A", 0): ((1,), 50), ("B", 0): ((2,), None)}, "other": {("a",): ((3,), None)}}


@pytest.mark.parametrize("kind", ["values", "lists", "maps", "map_keys"])
def test_a_function_that_returns_no_tuple_is_a_type_error_naming_the_state(kind: str) -> None:
    ks = KeyState()
    if kind == "values":
        ks.values = {"s": ((1,), None)}
    elif kind == "lists":
        ks.lists = {"s": [((1,), None)]}
    else:
        ks.maps = {"s": {("k",): ((1,), None)}}
    up = (StateUpgrade("1", "2", map_keys={"s": lambda k: [*k]}) if kind == "map_keys"
          else StateUpgrade("1", "2", values={"s": lambda v: [*v, 0]}))
    with pytest.raises(TypeError, match="the upgrade function of state 's' must return a tuple, got list"):
        up.apply(ks)


def test_a_state_upgrade_goes_between_two_versions_and_never_renames_what_it_drops() -> None:
    with pytest.raises(ValueError, match="from one version to another, got '2' twice"):
        StateUpgrade("2", "2")
    with pytest.raises(ValueError, match=r"state variable\(s\) \['a', 'b'\] are both renamed and dropped"):
        StateUpgrade("1", "2", rename={"b": "x", "a": "y", "c": "z"}, drop=("a", "b"))
    assert StateUpgrade("1", "2", rename={"a": "b"}, drop=("b",)).drop == ("b",), "drop is by the old name"


# ------------------------------------------------------------------ find_upgrade / version_of ------


class _Older(StatefulProcessor):
    ballast_version = "1"
    ballast_upgrades = (StateUpgrade("1", "2", drop=("on_older",)),)


class _Newer(StatefulProcessor):
    ballast_version = "2"
    ballast_upgrades: Any = ("not an upgrade", StateUpgrade("2", "1"), StateUpgrade("1", "2", drop=("on_newer",)))


def test_find_upgrade_looks_on_the_newer_class_first_then_the_older() -> None:
    got = find_upgrade(_Older, _Newer, "1", "2")
    assert got is not None and got.drop == ("on_newer",)
    got = find_upgrade(_Older, V2, "1", "2")
    assert got is not None and got.rename == {"n": "count"}, "V2's own"
    got = find_upgrade(_Older, V1, "1", "2")
    assert got is not None and got.drop == ("on_older",), "V1 has none: the older class's"
    got = find_upgrade(_Newer, V1, "2", "1")
    assert got is not None and (got.source, got.target) == ("2", "1"), "a rollback's, declared on the newer code"
    assert find_upgrade(V1, Lone9, "1", "9") is None
    assert find_upgrade(_Older, _Newer, "1", "3") is None
    assert find_upgrade(object, int, "1", "2") is None, "a class without ballast_upgrades has none"


def test_version_of_is_the_classes_label_or_the_default() -> None:
    class Plain:
        pass

    class Numbered:
        ballast_version = 4

    assert DEFAULT_VERSION == "1" and version_of(Plain) == "1"
    assert version_of(V3) == "3" and version_of(Numbered) == "4"


# ------------------------------------------------------------------ VersionChain ------------------


def test_tag_is_none_while_the_first_version_is_in_force() -> None:
    assert chain_of([("1", V1)]).tag() is None
    assert chain_of([("1", V1), ("2", V2)]).tag() == "2"
    rolled = chain_of([("1", V1), ("2", V2), ("1", V1)])
    assert rolled.tag() is None and (rolled.first, rolled.current) == ("1", "1")
    with pytest.raises(ValueError, match="at least the job's first version"):
        chain_of([])


def test_an_untagged_key_is_carried_over_two_hops_and_tagged_with_the_version_in_force() -> None:
    ks = _counted(5, expiry=900)
    chain_of([("1", V1), ("2", V2), ("3", V3)]).carry(ks)
    assert ks.values == {"total": ((50, 0), 900)}, "1 -> 2 renames and adds a field, 2 -> 3 renames and scales"
    assert ks.lists == {"seen": [(("a",), None)]} and ks.timers == {5000}
    assert ks.code == "3"
    again = KeyState(ks.to_bytes())
    assert again.code == "3" and again.same(ks)


def test_a_key_tagged_with_a_later_version_starts_from_there() -> None:
    ks = _counted(5)
    ks.values = {"count": ((5, 0), None)}
    ks.code = "2"
    chain_of([("1", V1), ("2", V2), ("3", V3)]).carry(ks)
    assert ks.values == {"total": ((50, 0), None)} and ks.code == "3", "only the 2 -> 3 hop"


def test_a_key_at_the_version_in_force_is_left_alone() -> None:
    ks = _counted(5, code="2")  # v1's shape, but tagged 2: carry trusts the tag and converts nothing
    chain_of([("1", V1), ("2", V2)]).carry(ks)
    assert ks.values == {"n": ((5,), None)} and ks.code == "2"


def test_after_a_rollback_a_key_written_by_the_newer_version_is_carried_back_and_ends_untagged() -> None:
    chain = chain_of([("1", V1), ("2", V2), ("1", V1)])
    ks = _counted(0, code="2")
    ks.values = {"count": ((7, 0), 800)}
    chain.carry(ks)
    assert ks.values == {"n": ((7,), 800)} and ks.code is None, "V2's StateUpgrade('2', '1'), found on the older entry"
    untouched = _counted(3)  # written by v1 before the upgrade, never touched by v2: still v1's shape
    chain.carry(untouched)
    assert untouched.values == {"n": ((3,), None)} and untouched.code is None


class _Hop2(StatefulProcessor):  # counts the hops a key's state takes: +1 forward, +100 back
    ballast_version = "2"
    ballast_upgrades = (StateUpgrade("1", "2", values={"hops": lambda v: (v[0] + 1,)}),
                        StateUpgrade("2", "1", values={"hops": lambda v: (v[0] + 100,)}))


def test_a_version_in_force_twice_is_carried_from_its_latest_time_only() -> None:
    ks = KeyState()
    ks.values = {"hops": ((0,), None)}  # v1's shape, whichever of v1's two times in force wrote it
    chain_of([("1", V1), ("2", _Hop2), ("1", V1), ("2", _Hop2)]).carry(ks)
    assert ks.values == {"hops": ((1,), None)} and ks.code == "2", "one hop 1 -> 2, not 1 -> 2 -> 1 -> 2"


def test_a_key_tagged_with_a_version_the_job_never_ran_fails() -> None:
    ks = _counted(5, code="7")
    never_ran = r"written by version '7', which this job never ran \(versions: \['1', '2'\]\)"
    with pytest.raises(UpgradeFailed, match=never_ran):
        chain_of([("1", V1), ("2", V2)]).carry(ks)
    assert ks.values == {"n": ((5,), None)} and ks.code == "7"


def test_a_missing_hop_fails_naming_it() -> None:
    ks = _counted(5)
    with pytest.raises(UpgradeFailed, match=r"no StateUpgrade\('2', '9'\) on either version's class"):
        chain_of([("1", V1), ("2", V2), ("9", Lone9)]).carry(ks)
    # the 1 -> 2 hop before it did run (hops apply as they are found; the tag is set only at the end):
    # the next test says why a half-carried KeyState does no harm
    assert ks.values == {"count": ((5, 0), None)} and ks.code is None
    ks1 = _counted(5)
    with pytest.raises(UpgradeFailed, match=r"no StateUpgrade\('1', '9'\)"):
        chain_of([("1", V1), ("9", Lone9)]).carry(ks1)
    assert ks1.same(_counted(5)), "the first hop is missing: nothing changed"


def test_a_hop_that_raises_fails_with_its_error_and_leaves_the_key_state_half_carried() -> None:
    ks = _counted(5, expiry=900)
    raised = r"StateUpgrade\('2', '3'\) raised ValueError: cannot convert \(5, 0\)"
    with pytest.raises(UpgradeFailed, match=raised) as e:
        chain_of([("1", V1), ("2", V2), ("3", Poisoned3)]).carry(ks)
    assert isinstance(e.value.__cause__, ValueError)
    # What the KeyState holds now: the 1 -> 2 hop applied, and of the failing 2 -> 3 hop the rename
    # (done before its values function raised) but not the conversion; the tag still says version 1.
    # So it is in no version's shape and must not be saved. It is not: the caller
    # (spark_jobs.processing._Runtime.call) catches the UpgradeFailed before the handler or
    # `save` runs, dead-letters the key's records with reason upgrade-error, and the next call loads
    # the key's state afresh from the store, where it is as the old version wrote it.
    assert ks.values == {"total": ((5, 0), 900)} and ks.code is None
    assert ks.lists == {"seen": [(("a",), None)]} and ks.timers == {5000}


def test_an_empty_key_just_takes_the_current_tag_without_any_hop() -> None:
    fresh = KeyState()
    chain_of([("1", V1), ("9", Lone9)]).carry(fresh)  # no StateUpgrade('1', '9'): nothing to carry
    assert fresh.code == "9" and fresh.empty() and fresh.to_bytes() is None
    back = KeyState()
    back.code = "9"
    chain_of([("1", V1), ("9", Lone9), ("1", V1)]).carry(back)
    assert back.code is None
    timers_only = KeyState()
    timers_only.timers = {1}
    with pytest.raises(UpgradeFailed, match="no StateUpgrade"):
        chain_of([("1", V1), ("9", Lone9)]).carry(timers_only)  # a timer is state: not empty
