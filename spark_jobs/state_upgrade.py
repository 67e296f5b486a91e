"""Carrying a key's state from one version of a processor to another (a live upgrade's schema evolution).

A processor declares its version (`ballast_version`) and, for each version it can take state
from, a `StateUpgrade`: which state variables it renames or drops, and a function per variable
that turns one stored value into the new version's (add a field, drop one, retype one). An upgrade
step (docs/protocol.md) does not rewrite the state at once: each key carries the version that wrote
it (`KeyState.code`), and the first time the new version handles the key, its state is carried
over hop by hop along the job's versions (`carry`). So the step itself costs one epoch boundary
whatever the state's size, a key nobody touches is never converted, and a rollback is one more hop
(declared by the newer version: `StateUpgrade("2", "1", ...)`). A function that raises on a key
leaves that key's stored state as it was (the half-carried copy in memory is dropped, never
saved): its records become dead letters with reason `upgrade-error` (spark_jobs.processing), so
nothing is lost and the operator can roll back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ballast.errors import BallastError
from spark_jobs.key_state import KeyState

DEFAULT_VERSION = "1"  # a processor that declares no ballast_version


@dataclass(frozen=True)
class StateUpgrade:
    """How state written by version `source` becomes version `target`'s.

    `rename`: state variables that changed name (old -> new). `drop`: variables the target no longer
    has (by their old name). `values`: per variable (by its new name), a function applied to each
    stored value — a value state's tuple, every element of a list state, every value of a map
    state — returning the new tuple (`lambda v: (*v, 0)` adds a field). `map_keys`: the same for the
    user keys of a map state. Variables not named carry over as they are; their TTLs are kept.
    Declare it on the newer class: `ballast_upgrades = (StateUpgrade("1", "2", ...), StateUpgrade("2", "1", ...))`,
    the second one making a rollback possible."""

    source: str
    target: str
    rename: Mapping[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    values: Mapping[str, Callable[[tuple], tuple]] = field(default_factory=dict)
    map_keys: Mapping[str, Callable[[tuple], tuple]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.source == self.target:
            raise ValueError(f"a StateUpgrade goes from one version to another, got {self.source!r} twice")
        clash = set(self.rename) & set(self.drop)
        if clash:
            raise ValueError(f"state variable(s) {sorted(clash)} are both renamed and dropped")

    def apply(self, ks: KeyState) -> None:
        """Carry `ks` over in place (raises what a declared function raises)."""
        def moved(d: dict[str, Any]) -> dict[str, Any]:
            return {self.rename.get(n, n): v for n, v in d.items() if n not in self.drop}

        ks.values, ks.lists, ks.maps = moved(ks.values), moved(ks.lists), moved(ks.maps)
        for name, fn in self.values.items():
            if name in ks.values:
                v, exp = ks.values[name]
                ks.values[name] = (_tuple(fn(v), name), exp)
            if name in ks.lists:
                ks.lists[name] = [(_tuple(fn(v), name), exp) for v, exp in ks.lists[name]]
            if name in ks.maps:
                ks.maps[name] = {k: (_tuple(fn(v), name), exp) for k, (v, exp) in ks.maps[name].items()}
        for name, fn in self.map_keys.items():
            if name in ks.maps:
                ks.maps[name] = {_tuple(fn(k), name): v for k, v in ks.maps[name].items()}


def _tuple(value: Any, name: str) -> tuple:
    if not isinstance(value, tuple):
        raise TypeError(f"the upgrade function of state {name!r} must return a tuple, got {type(value).__name__}")
    return value


class UpgradeFailed(BallastError, RuntimeError):
    """A key's state could not be carried over to the version in force; the message says which hop and why."""


def version_of(cls: type) -> str:
    """A processor class's version label (`ballast_version`, else DEFAULT_VERSION)."""
    return str(getattr(cls, "ballast_version", DEFAULT_VERSION))


def find_upgrade(older: type, newer: type, source: str, target: str) -> StateUpgrade | None:
    """The StateUpgrade from `source` to `target` declared on either class (the target's first)."""
    for cls in (newer, older):
        for up in getattr(cls, "ballast_upgrades", ()) or ():
            if isinstance(up, StateUpgrade) and (up.source, up.target) == (source, target):
                return up
    return None


@dataclass(frozen=True)
class VersionChain:
    """A job's processor versions in the order they came into force (the command line's first, then
    every applied upgrade step); the last one runs. A key tagged with a version is carried over from
    that version's last time in force, one hop per later version."""

    entries: tuple[tuple[str, type], ...]  # (version label, class)

    @property
    def current(self) -> str:
        return self.entries[-1][0]

    @property
    def first(self) -> str:
        return self.entries[0][0]

    def tag(self) -> str | None:
        """What a key written now carries: None while the first version is in force (state written
        before upgrades existed stays byte for byte the same)."""
        return None if self.current == self.first else self.current

    def carry(self, ks: KeyState) -> None:
        """Bring `ks` to the version in force (UpgradeFailed if a hop is missing or raises); a key
        with no state yet is simply the current version's."""
        if ks.empty():
            ks.code = self.tag()
            return
        have = ks.code if ks.code is not None else self.first
        if have == self.current:
            return
        at = max((i for i, (v, _) in enumerate(self.entries) if v == have), default=None)
        if at is None:
            raise UpgradeFailed(f"the key's state was written by version {have!r}, which this job never ran "
                                f"(versions: {[v for v, _ in self.entries]})")
        for (src, older), (dst, newer) in zip(self.entries[at:], self.entries[at + 1:], strict=False):
            if src == dst:
                continue
            up = find_upgrade(older, newer, src, dst)
            if up is None:
                raise UpgradeFailed(f"no StateUpgrade({src!r}, {dst!r}) on either version's class")
            try:
                up.apply(ks)
            except Exception as exc:
                raise UpgradeFailed(f"StateUpgrade({src!r}, {dst!r}) raised {type(exc).__name__}: {exc}") from exc
        ks.code = self.tag()


def chain_of(entries: Sequence[tuple[str, type]]) -> VersionChain:
    if not entries:
        raise ValueError("a version chain has at least the job's first version")
    return VersionChain(tuple(entries))
