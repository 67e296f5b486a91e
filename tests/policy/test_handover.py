"""ballast.policy.handover: UniMiCo's timestamps, and the rule checked against a run without a migration.

The simulations below run a windowed count, a windowed join and session windows over random streams
with out-of-order rows (Ballast's watermark: the largest event time of earlier epochs minus the
lateness; rows below it are late and dropped), once on one owner and once with a handover at a
random epoch (the old owner keeps the rows and timers of its range until the watermark completes the
handover, the new owner gets the rows of its range from the step's epoch on). The outputs must be
equal as multisets, and nothing is copied: the new owner starts empty.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from ballast.policy.handover import (
    BinCosts,
    Handover,
    WindowSpec,
    choose_mode,
    choose_modes,
    estimated_wait_s,
    handover_wait_s,
    migration_timestamp,
    pair_windows,
    session_closed,
)


def test_unimico_worked_example() -> None:
    """The paper's Fig. 2: window 4, slide 2, w1 starts at 1, the target's first tuple at 4: δ = 1 and
    ts_mi = 3 (w2's start); the origin runs until w2 expires (7), the target owns w3 (5) on."""
    spec = WindowSpec(length_ms=4, slide_ms=2)
    assert migration_timestamp(spec, first_event_ms=4, last_window_start_ms=1) == 3
    h = Handover.at(spec, 4, 1)
    assert (h.migration_ms, h.activation_ms, h.boundary_ms, h.overlap_ms) == (3, 5, 7, 2)
    assert migration_timestamp(spec, first_event_ms=5, last_window_start_ms=1) == 3  # (5-1)%2 = 0: δ = s
    assert migration_timestamp(spec, first_event_ms=1, last_window_start_ms=3) == 3  # already produced


def test_tumbling_windows_have_no_overlap() -> None:
    h = Handover.at(WindowSpec(10_000), first_event_ms=123_456)
    assert (h.migration_ms, h.activation_ms, h.boundary_ms, h.overlap_ms) == (120_000, 130_000, 130_000, 0)
    assert h.to_old(129_999) and not h.to_new(129_999) and h.to_new(130_000) and not h.to_old(130_000)
    assert h.old_emits(130_000) and not h.new_emits(130_000) and h.new_emits(140_000)
    assert not h.complete(129_999) and h.complete(130_000)
    on_grid = Handover.at(WindowSpec(10_000), first_event_ms=130_000)
    assert on_grid.activation_ms == 130_000  # a window that starts at the first event is the new owner's


def test_window_starts_and_join_pairs() -> None:
    spec = WindowSpec(10, 5, offset_ms=2)
    assert spec.starts_containing(13) == [7, 12] and spec.kind == "sliding"
    assert spec.starts_containing(-4) == [-13, -8]
    assert pair_windows(spec, 13, 16) == [7, 12] and pair_windows(spec, 8, 16) == [7]
    assert pair_windows(spec, 1, 16) == []  # no window holds both
    assert WindowSpec(10).starts_containing(13) == [10]


@pytest.mark.parametrize("bad,match", [
    (dict(length_ms=0), "length must be > 0"), (dict(length_ms=10, slide_ms=20), "slide must be in 1..length"),
    (dict(length_ms=10, slide_ms=0), "slide must be in"), (dict(length_ms=0, gap_ms=0), "gap must be > 0"),
])
def test_a_window_spec_that_cannot_hand_over_is_refused(bad: dict[str, int], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        WindowSpec(**bad)


# --- the rule against a run without a migration -------------------------------------------------------

Row = tuple[int, int]  # (event time, side: 0/1 for a join's inputs)


def _stream(rng: random.Random, epochs: int, lateness: int) -> list[list[Row]]:
    """Epochs of rows whose event times advance with disorder up to twice the lateness (some late)."""
    t, out = 0, []
    for _ in range(epochs):
        rows = []
        for _ in range(rng.randint(0, 6)):
            t += rng.randint(0, 4)
            rows.append((max(0, t - rng.randint(0, 2 * lateness)), rng.randint(0, 1)))
        out.append(rows)
    return out


class WindowOwner:
    """A windowed count (or a join's pair count) of one bin on one owner: state per window start,
    outputs from the timer at the window's end, which fires once the watermark reaches it. With
    `phases` (staggered windows) a row's second field is its key, whose grid is shifted by its phase."""

    def __init__(self, spec: WindowSpec, join: bool, emits: Callable[[int, int], bool],
                 phases: dict[int, int] | None = None) -> None:
        self.spec, self.join, self.emits, self.phases = spec, join, emits, phases
        self.windows: dict[tuple[int, int], list[Row]] = {}
        self.out: list[tuple[int, int, int]] = []
        self.state_rows_loaded = 0  # nothing is ever loaded from another owner

    def add(self, row: Row) -> None:
        key = -1 if self.phases is None else row[1]
        for s in self.spec.starts_containing(row[0], 0 if self.phases is None else self.phases[key]):
            self.windows.setdefault((key, s), []).append(row)

    def fire(self, watermark: int) -> None:
        for key, s in sorted(w for w in self.windows if w[1] + self.spec.length_ms <= watermark):
            rows = self.windows.pop((key, s))  # the handler runs (and clears the window) either way
            n = sum(1 for a in rows for b in rows if a[1] == 0 and b[1] == 1) if self.join else len(rows)
            if self.emits(s + self.spec.length_ms, key):
                self.out.append((key, s, n))


def _run_windows(spec: WindowSpec, epochs: list[list[Row]], lateness: int, join: bool, step: int | None,
                 phases: dict[int, int] | None = None, at: Callable[..., Handover] = Handover.at,
                 per_key: bool = False, wasted: list[int] | None = None,
                 ) -> tuple[Counter[tuple[int, int, int]], Handover | None, int]:
    """A bin's windows over `epochs`, handed over at epoch `step` (None: no migration). `per_key`
    (staggered windows): each key's own timestamps (`Handover.for_key`) decide its rows and outputs.
    `wasted` counts the rows the new owner folds only into windows whose outputs it drops."""
    wasted = wasted if wasted is not None else [0]
    old = WindowOwner(spec, join, lambda end, key: True, phases)
    new: WindowOwner | None = None
    h: Handover | None = None
    event_max, done_at = -1, -1

    def of(key: int) -> Handover:
        assert h is not None
        return h.for_key(phases[key]) if per_key and phases is not None else h

    for e, rows in enumerate(epochs):
        watermark = max(0, event_max - lateness)
        if step is not None and e == step:
            h = at(spec, event_max + 1)
            old.emits = lambda end, key: of(key).old_emits(end)
            new = WindowOwner(spec, join, lambda end, key: of(key).new_emits(end), phases)
        for row in rows:
            if row[0] < watermark:
                continue  # late: a dead letter on every run alike
            if h is None or (done_at < 0 and h.to_old(row[0])):
                old.add(row)
            if h is not None and new is not None and of(row[1]).to_new(row[0]):
                new.add(row)
                grid = phases[row[1]] if phases is not None else 0
                wasted[0] += all(not of(row[1]).new_emits(st + spec.length_ms)
                                 for st in spec.starts_containing(row[0], grid))
        if done_at < 0:
            old.fire(watermark)
        if new is not None:
            new.fire(watermark)
        if h is not None and done_at < 0 and h.complete(watermark):
            done_at = e
            old.windows.clear()  # the old owner drops the bin: its completion checkpoint
        event_max = max([event_max, *(r[0] for r in rows)])
    for o in (old, new):  # the end of the stream closes every window on both runs
        if o is not None and (o is new or done_at < 0):
            o.fire(10**12)
    out = Counter(old.out) + Counter(new.out if new is not None else [])
    return out, h, done_at


@pytest.mark.parametrize("spec", [WindowSpec(10), WindowSpec(10, 5), WindowSpec(12, 4, offset_ms=3), WindowSpec(7, 1)],
                         ids=["tumbling", "sliding", "sliding-offset", "slide-1"])
@pytest.mark.parametrize("join", [False, True], ids=["count", "join"])
def test_a_handover_gives_the_outputs_of_a_run_without_one(spec: WindowSpec, join: bool) -> None:
    rng = random.Random(f"{spec}-{join}")
    completed = 0
    for _ in range(150):
        lateness = rng.randint(0, 6)
        epochs = _stream(rng, 40, lateness)
        want, _, _ = _run_windows(spec, epochs, lateness, join, None)
        step = rng.randint(1, 30)
        got, h, done_at = _run_windows(spec, epochs, lateness, join, step)
        assert got == want, (spec, join, lateness, step, h)
        completed += done_at >= 0
    assert completed > 100  # most handovers complete inside the stream (the check above covers the rest)


@pytest.mark.parametrize("spec", [WindowSpec(10, staggered=True), WindowSpec(12, 4, staggered=True),
                                  WindowSpec(7, 1, staggered=True)], ids=["tumbling", "sliding", "slide-1"])
def test_a_handover_of_staggered_windows_gives_the_outputs_of_a_run_without_one(spec: WindowSpec) -> None:
    """Each key's grid shifted by its own phase (the row's second field is its key): the grid-free
    timestamps hand every key over correctly, whatever its phase."""
    rng = random.Random(f"{spec}")
    completed = 0
    for _ in range(150):
        lateness, phases = rng.randint(0, 6), {0: rng.randrange(spec.slide), 1: rng.randrange(spec.slide)}
        epochs = _stream(rng, 40, lateness)
        want, _, _ = _run_windows(spec, epochs, lateness, False, None, phases)
        step = rng.randint(1, 30)
        got, h, done_at = _run_windows(spec, epochs, lateness, False, step, phases)
        assert got == want, (spec, lateness, step, phases, h)
        assert h is not None and h.activation_ms == h.migration_ms + 1 and h.overlap_ms == spec.length_ms - 1
        completed += done_at >= 0
    assert completed > 100


@pytest.mark.parametrize("spec", [WindowSpec(10, staggered=True), WindowSpec(12, 4, staggered=True)],
                         ids=["tumbling", "sliding"])
def test_each_staggered_key_hands_over_on_its_own_grid_and_the_new_owner_folds_no_row_for_nothing(
        spec: WindowSpec) -> None:
    """With the framework's phase known per key, each key takes its own grid's timestamps: the same
    outputs, and the new owner folds no row only into windows it then drops (the grid-free rule has
    it fold up to a whole window of every moved key for nothing)."""
    rng = random.Random(f"per-key-{spec}")
    both_key, both_free = [0], [0]
    for _ in range(150):
        lateness, phases = rng.randint(0, 6), {0: rng.randrange(spec.slide), 1: rng.randrange(spec.slide)}
        epochs, step = _stream(rng, 40, lateness), rng.randint(1, 30)
        want, _, _ = _run_windows(spec, epochs, lateness, False, None, phases)
        got, h, _ = _run_windows(spec, epochs, lateness, False, step, phases, per_key=True, wasted=both_key)
        assert got == want, (spec, lateness, step, phases, h)
        assert h is not None and all(h.for_key(p).boundary_ms <= h.boundary_ms for p in range(spec.slide))
        _run_windows(spec, epochs, lateness, False, step, phases, wasted=both_free)
    assert both_free[0] > 50 and both_key[0] == 0, (both_key, both_free)
    assert WindowSpec(10).phase_of(("k",)) == 0 and 0 <= spec.phase_of(("k", 7)) < spec.slide
    assert spec.phase_of(("k", 7)) == spec.phase_of(["k", 7]), "the grouping key's values, however passed"


@pytest.mark.parametrize("spec", [WindowSpec(10, staggered=True), WindowSpec(12, 4, 3, staggered=True),
                                  WindowSpec(90_000, staggered=True), WindowSpec(10)],
                         ids=["tumbling", "sliding-offset", "90s", "not-staggered"])
def test_a_keys_bounds_in_arithmetic_are_those_of_its_own_grid(spec: WindowSpec) -> None:
    """`Handover.key_bounds` (what the data plane asks per key) = `for_key`'s timestamps, for every
    phase and first event, negative event times too."""
    rng = random.Random(f"key-bounds-{spec}")
    for _ in range(300):
        h = Handover.at(spec, rng.randint(-3 * spec.length_ms, 10 * spec.length_ms))
        for p in {0, spec.slide - 1, rng.randrange(spec.slide)}:
            k = h.for_key(p)
            assert h.key_bounds(p) == (k.activation_ms, k.boundary_ms), (spec, h, p)


def test_staggered_windows_need_the_grid_free_timestamps() -> None:
    """The check above can fail: the grid's timestamps (as if every key's phase were 0) split some
    shifted key's window between the owners, and that window comes out wrong or not at all."""
    spec, rng, broken = WindowSpec(10, staggered=True), random.Random(5), 0
    on_grid = lambda sp, first: Handover.at(WindowSpec(sp.length_ms, sp.slide_ms), first)  # noqa: E731
    for _ in range(50):
        epochs, phases = _stream(rng, 40, 2), {0: 0, 1: rng.randrange(1, 10)}
        want, _, _ = _run_windows(spec, epochs, 2, False, None, phases)
        got, _, _ = _run_windows(spec, epochs, 2, False, rng.randint(1, 30), phases, on_grid)
        broken += got != want
    assert broken > 10


def test_without_the_suppression_the_overlap_would_double() -> None:
    """The check above can fail: a new owner that also emits the old owner's windows doubles them."""
    spec, rng = WindowSpec(10, 5), random.Random(3)
    epochs = _stream(rng, 40, 2)
    want, _, _ = _run_windows(spec, epochs, 2, False, None)
    original = Handover.new_emits
    try:
        Handover.new_emits = lambda self, end: True  # type: ignore[method-assign]
        got, _, _ = _run_windows(spec, epochs, 2, False, 10)
    finally:
        Handover.new_emits = original  # type: ignore[method-assign]
    assert sum(got.values()) > sum(want.values())


def _sessions(rows: list[int], gap: int) -> list[list[int]]:
    chains: list[list[int]] = []
    for t in sorted(rows):
        if chains and t < chains[-1][-1] + gap:
            chains[-1].append(t)
        else:
            chains.append([t])
    return chains


class SessionOwner:
    """Session windows of one key: rows kept until their session closes (the watermark a gap past its
    last row), then (start, end, rows) emitted if this owner owns sessions that start there."""

    def __init__(self, gap: int, owns: Callable[[int], bool]) -> None:
        self.gap, self.owns, self.rows, self.out = gap, owns, [], []  # type: ignore[var-annotated]

    def fire(self, watermark: int) -> None:
        keep = []
        for c in _sessions(self.rows, self.gap):
            if session_closed(c[-1], self.gap, watermark):
                if self.owns(c[0]):
                    self.out.append((c[0], c[-1], len(c)))
            else:
                keep += c
        self.rows = keep

    def open_owned(self) -> bool:
        return any(self.owns(c[0]) for c in _sessions(self.rows, self.gap))


def _run_sessions(gap: int, epochs: list[list[Row]], lateness: int, step: int | None) -> Counter[tuple[int, int, int]]:
    old = SessionOwner(gap, lambda start: True)
    new: SessionOwner | None = None
    h: Handover | None = None
    event_max, done = -1, False
    for e, rows in enumerate(epochs):
        watermark = max(0, event_max - lateness)
        if step is not None and e == step:
            h = Handover.at(WindowSpec(0, gap_ms=gap), event_max + 1)
            hh = h
            old.owns = lambda start: hh.session_owner(start) == "old"
            new = SessionOwner(gap, lambda start: hh.session_owner(start) == "new")
        for t, _ in rows:
            if t < watermark:
                continue
            if not done and (h is None or h.to_old(t)):
                old.rows.append(t)
            if h is not None and new is not None and h.to_new(t):
                new.rows.append(t)
        if not done:
            old.fire(watermark)
        if new is not None:
            new.fire(watermark)
        if h is not None and not done and h.complete(watermark) and not old.open_owned():
            done = True
        event_max = max([event_max, *(r[0] for r in rows)])
    for o in (old, new):
        if o is not None and (o is new or not done):
            o.fire(10**12)
    return Counter(old.out) + Counter(new.out if new is not None else [])


def test_session_windows_split_by_the_start_of_each_session() -> None:
    rng = random.Random(7)
    for _ in range(300):
        gap, lateness = rng.randint(1, 8), rng.randint(0, 5)
        epochs = _stream(rng, 40, lateness)
        step = rng.randint(1, 30)
        assert _run_sessions(gap, epochs, lateness, step) == _run_sessions(gap, epochs, lateness, None), (gap, step)


def test_the_wait_for_a_handover_follows_the_watermark() -> None:
    h = Handover.at(WindowSpec(10_000, 5_000), first_event_ms=101_000)
    assert h.boundary_ms == 110_000
    assert handover_wait_s(h, watermark_ms=104_000, epoch_s=0.5) == pytest.approx(6.5)
    assert handover_wait_s(h, watermark_ms=104_000, event_time_rate=3.0, epoch_s=0.0) == pytest.approx(2.0)
    assert handover_wait_s(h, watermark_ms=120_000, epoch_s=0.5) == 0.5
    with pytest.raises(ValueError, match="event_time_rate"):
        handover_wait_s(h, 0, event_time_rate=0)


def test_without_a_watermark_the_wait_is_the_window_and_the_lateness_of_event_time() -> None:
    # the boundary is at most a window past the largest event read; the watermark trails that by the lateness
    assert estimated_wait_s(WindowSpec(10_000), lateness_ms=20_000, epoch_s=0.5) == pytest.approx(30.5)
    assert estimated_wait_s(WindowSpec(10_000, 5_000), 5_000, epoch_s=0.0, event_time_rate=3.0) == pytest.approx(5.0)
    assert estimated_wait_s(WindowSpec(0, gap_ms=4_000), 1_000, epoch_s=0.0) == pytest.approx(5.0)
    for first in range(100_000, 130_000, 700):  # never shorter than the wait from the real watermark
        h = Handover.at(WindowSpec(10_000, 5_000), first)
        assert handover_wait_s(h, first - 1 - 5_000, epoch_s=0.0) <= estimated_wait_s(h.spec, 5_000, epoch_s=0.0)
    with pytest.raises(ValueError, match="lateness_ms"):
        estimated_wait_s(WindowSpec(10_000), -1)


def test_the_planner_chooses_transfer_handover_or_precopy_per_bin() -> None:
    b, a = 1e-5, 50.0  # 100 MB/s and 50 ms per step: the cost model's defaults
    small = BinCosts(0, state_bytes=1_000_000, windowed=True, handover_wait_s=8)
    big_windowed = BinCosts(1, state_bytes=600_000_000, changed_bytes_per_epoch=2e6, windowed=True, handover_wait_s=8)
    big_long = BinCosts(2, state_bytes=600_000_000, changed_bytes_per_epoch=2e6, windowed=True, handover_wait_s=900)
    big_plain = BinCosts(3, state_bytes=600_000_000, changed_bytes_per_epoch=2e6)
    got = choose_modes([small, big_windowed, big_long, big_plain], b, a, pause_budget_ms=200, step_budget_s=60)
    assert [c.mode for c in got] == ["transfer", "handover", "precopy", "precopy"]
    assert got[1].bytes_moved == 0 and got[1].pause_ms == 0 and "nothing is copied" in got[1].reason
    assert "past the 60 s step budget" in got[2].reason and "declares no windows" in got[3].reason
    assert got[0].pause_ms == pytest.approx(60.0)
    forced = choose_mode(small, b, a, 200, 60, forced="handover")
    assert forced.mode == "handover" and "forced" in forced.reason
    with pytest.raises(ValueError, match="declares none"):
        choose_mode(big_plain, b, a, 200, 60, forced="handover")
    with pytest.raises(ValueError, match="unknown move mode"):
        choose_mode(small, b, a, 200, 60, forced="teleport")  # type: ignore[arg-type]
