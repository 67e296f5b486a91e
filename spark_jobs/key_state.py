"""One grouping key's state under Ballast's processor API (spark_jobs.processor): the key's
values, lists, maps and timers as one value of its bin (`KeyState`, pickled, so the whole key moves
with the bin and sits in one changelog entry), and the state variables a processor's handle gives
out (`ValueState`, `ListState`, `MapState`), each bound to the key the runtime points at."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Protocol


class ProcessingClock(Protocol):
    def getCurrentProcessingTimeInMs(self) -> int: ...  # noqa: N802 (Spark's TimerValues name)


class KeyHolder(Protocol):
    """What a state variable needs of its handle: the state of the key being processed and the
    processing time that TTLs count from."""

    @property
    def timer_values(self) -> ProcessingClock: ...

    def _key_state(self) -> KeyState: ...


class KeyState:
    """Every state variable and timer of one grouping key, stored as one value of the key's bin.

    Values carry their TTL expiry (processing time in ms, None = never); an expired value reads as
    absent and is dropped at the next save (`compact`). `code` is the processor version that wrote
    it, None for the job's first version (spark_jobs.state_upgrade carries it over to a later one)."""

    def __init__(self, raw: bytes | None = None) -> None:
        doc = pickle.loads(raw) if raw else {}
        self.values: dict[str, tuple[tuple, int | None]] = doc.get("v", {})
        self.lists: dict[str, list[tuple[tuple, int | None]]] = doc.get("l", {})
        self.maps: dict[str, dict[tuple, tuple[tuple, int | None]]] = doc.get("m", {})
        self.timers: set[int] = set(doc.get("t", ()))
        self.code: str | None = doc.get("c")

    def compact(self, now_ms: int) -> None:
        """Drop every value whose TTL expired at `now_ms`."""
        def live(exp: int | None) -> bool:
            return exp is None or exp > now_ms

        self.values = {n: v for n, v in self.values.items() if live(v[1])}
        self.lists = {n: kept for n, lst in self.lists.items() if (kept := [x for x in lst if live(x[1])])}
        self.maps = {n: kept_map for n, mp in self.maps.items()
                     if (kept_map := {k: v for k, v in mp.items() if live(v[1])})}

    def next_expiry(self) -> int | None:
        exps = [v[1] for v in self.values.values()] + [x[1] for lst in self.lists.values() for x in lst] + \
               [v[1] for mp in self.maps.values() for v in mp.values()]
        return min((e for e in exps if e is not None), default=None)

    def same(self, other: KeyState) -> bool:
        """Equal content (pickled bytes of equal state may differ in their memo, so compare this)."""
        return (self.values, self.lists, self.maps, self.timers, self.code) == (
            other.values, other.lists, other.maps, other.timers, other.code)

    def empty(self) -> bool:
        return not (self.values or self.lists or self.maps or self.timers)

    def to_bytes(self) -> bytes | None:
        """None when nothing is left (the key's entry is deleted)."""
        if self.empty():
            return None
        doc = {"v": dict(sorted(self.values.items())), "l": dict(sorted(self.lists.items())),
               "m": {n: dict(sorted(mp.items(), key=lambda kv: repr(kv[0]))) for n, mp in sorted(self.maps.items())},
               "t": sorted(self.timers), **({"c": self.code} if self.code is not None else {})}
        return pickle.dumps(doc, protocol=5)


class StateVar:
    """Base of the state variables: bound to the handle, which points at the current key."""

    def __init__(self, handle: KeyHolder, name: str, ttl_ms: int | None) -> None:
        self._h, self._name, self._ttl = handle, name, ttl_ms

    @property
    def _ks(self) -> KeyState:
        return self._h._key_state()

    def _now(self) -> int:
        return self._h.timer_values.getCurrentProcessingTimeInMs()

    def _exp(self) -> int | None:
        return None if self._ttl is None else self._now() + self._ttl

    def _live(self, exp: int | None) -> bool:
        return exp is None or exp > self._now()


class ValueState(StateVar):
    def exists(self) -> bool:
        v = self._ks.values.get(self._name)
        return v is not None and self._live(v[1])

    def get(self) -> tuple | None:
        v = self._ks.values.get(self._name)
        return tuple(v[0]) if v is not None and self._live(v[1]) else None

    def update(self, new_value: tuple) -> None:
        self._ks.values[self._name] = (tuple(new_value), self._exp())

    def clear(self) -> None:
        self._ks.values.pop(self._name, None)


class ListState(StateVar):
    def exists(self) -> bool:
        return any(self._live(e) for _, e in self._ks.lists.get(self._name, ()))

    def get(self) -> Iterator[tuple]:
        return iter([tuple(v) for v, e in self._ks.lists.get(self._name, ()) if self._live(e)])

    def put(self, new_state: list[tuple]) -> None:
        exp = self._exp()
        if new_state:
            self._ks.lists[self._name] = [(tuple(v), exp) for v in new_state]
        else:
            self.clear()

    def append_value(self, new_state: tuple) -> None:
        self._ks.lists.setdefault(self._name, []).append((tuple(new_state), self._exp()))

    def append_list(self, new_state: list[tuple]) -> None:
        exp = self._exp()
        if new_state:
            self._ks.lists.setdefault(self._name, []).extend((tuple(v), exp) for v in new_state)

    def clear(self) -> None:
        self._ks.lists.pop(self._name, None)

    appendValue = append_value
    appendList = append_list


class MapState(StateVar):
    def _live_items(self) -> list[tuple[tuple, tuple]]:
        return [(k, tuple(v)) for k, (v, e) in self._ks.maps.get(self._name, {}).items() if self._live(e)]

    def exists(self) -> bool:
        return bool(self._live_items())

    def get_value(self, key: tuple) -> tuple | None:
        v = self._ks.maps.get(self._name, {}).get(tuple(key))
        return tuple(v[0]) if v is not None and self._live(v[1]) else None

    def contains_key(self, key: tuple) -> bool:
        return self.get_value(key) is not None

    def update_value(self, key: tuple, value: tuple) -> None:
        self._ks.maps.setdefault(self._name, {})[tuple(key)] = (tuple(value), self._exp())

    def iterator(self) -> Iterator[tuple[tuple, tuple]]:
        return iter(self._live_items())

    def keys(self) -> Iterator[tuple]:
        return iter([k for k, _ in self._live_items()])

    def values(self) -> Iterator[tuple]:
        return iter([v for _, v in self._live_items()])

    def remove_key(self, key: tuple) -> None:
        mp = self._ks.maps.get(self._name)
        if mp is not None:
            mp.pop(tuple(key), None)
            if not mp:
                self.clear()

    def clear(self) -> None:
        self._ks.maps.pop(self._name, None)

    getValue = get_value
    containsKey = contains_key
    updateValue = update_value
    removeKey = remove_key
