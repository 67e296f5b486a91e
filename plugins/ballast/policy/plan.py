"""A migration plan's shape: ordered steps and the rule by which they compose.

The planner builds these and the cost model prices them. Both import the shapes from here, so
the imports run one way (planner -> costmodel -> plan): the planner's `auto` strategy asks the
cost model, and the cost model never needs the planner. Pure data, no framework import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from ballast.code_version import CodeVersion
from ballast.policy.handover import Mode, ModeChoice
from ballast.protocol import Move, Settings

__all__ = ["ORDERS", "STRATEGIES", "Order", "MigrationPlan", "MigrationStep", "Strategy", "apply_moves",
           "settings_plan", "split_plan", "upgrade_plan"]

Strategy = Literal["all-at-once", "fluid", "batched", "auto"]
Order = Literal["hot-first", "largest-first", "smallest-first", "by-id"]
STRATEGIES = ("all-at-once", "fluid", "batched", "auto")
ORDERS = ("hot-first", "largest-first", "smallest-first", "by-id")


@dataclass(frozen=True)
class MigrationStep:
    """One control step: moves, worker count after it, map version expected before it."""

    step: int  # 1-based
    moves: tuple[Move, ...]
    workers: int
    map_version: int
    bytes: int = 0
    keys: int = 0
    effective_offset_s: float = 0.0  # "not before" = plan start + this
    split_to: int | None = None  # a split step: the bin count after it (no moves, same workers)
    settings: Settings | None = None  # a settings step: what it changes (no moves, same workers)
    merge_to: int | None = None  # a merge step: the bin count after it (no moves, same workers)
    code: CodeVersion | None = None  # an upgrade step: the processor version it deploys (no moves, same workers)
    # how its bins move (docs/handover.md): one mode per step, the control step's precopy/handover flag
    mode: Mode = "transfer"
    cutover_bytes: int | None = None  # what the cut-over loads (pre-copy: the changes; handover: 0); None: `bytes`
    wait_s: float = 0.0  # a handover's wait until the old owners' last windows close

    @property
    def bins(self) -> int:
        return len(self.moves)

    @property
    def kind(self) -> str:
        """Protocol kind: a split raises the bin count, a settings step changes the job's settings; a
        step without moves only changes W."""
        return ("split" if self.split_to else "merge" if self.merge_to else "settings" if self.settings is not None
                else "upgrade" if self.code is not None else "moves" if self.moves else "noop")

    @property
    def bins_after(self) -> int | None:
        """A split's or a merge's bin count after the step (the control step's `bins`); None otherwise."""
        return self.split_to or self.merge_to


@dataclass(frozen=True)
class MigrationPlan:
    """An ordered migration; `steps` compose from `current` to `target`."""

    strategy: str
    order: str
    base_version: int
    from_workers: int
    to_workers: int
    steps: tuple[MigrationStep, ...]
    gap_s: float = 0.0
    knobs: dict[str, float] = field(default_factory=dict)
    modes: tuple[ModeChoice, ...] = ()  # each moving bin's mode and why (empty: every bin by transfer)

    @property
    def bins(self) -> int:
        return sum(s.bins for s in self.steps)

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.steps)


def split_plan(base_version: int, assignment: Sequence[int], workers: int, bins: int) -> MigrationPlan:
    """One split step: every bin's 2^d parts stay on its worker (the job checks the same rule)."""
    if bins <= len(assignment) or bins & (bins - 1):
        raise ValueError(f"a split raises the bin count to a larger power of two, not {len(assignment)} -> {bins}")
    step = MigrationStep(step=1, moves=(), workers=workers, map_version=base_version, split_to=bins)
    return MigrationPlan("split", "by-id", base_version, workers, workers, (step,))


def merge_plan(base_version: int, assignment: Sequence[int], workers: int, bins: int,
               size: Sequence[int] | None = None) -> MigrationPlan:
    """Lower the bin count to `bins`: a merged bin's parts must share a worker, so a first step moves
    the parts that do not to the worker that holds most of them (by bytes when `size` is given, else
    by count; ties to the lower worker), then the merge step (no key moves)."""
    have = len(assignment)
    if bins >= have or bins < 1 or bins & (bins - 1):
        raise ValueError(f"a merge lowers the bin count to a smaller power of two, not {have} -> {bins}")
    if workers > bins:
        raise ValueError(f"a merge to {bins} bins leaves fewer bins than the {workers} workers")
    d = (have // bins).bit_length() - 1
    moves = []
    for p in range(bins):
        parts = range(p << d, (p + 1) << d)
        held: dict[int, int] = {}
        for c in parts:
            held[assignment[c]] = held.get(assignment[c], 0) + (size[c] if size is not None else 1)
        home = max(sorted(held), key=lambda w: held[w])
        moves += [Move(c, assignment[c], home) for c in parts if assignment[c] != home]
    steps = []
    if moves:
        nbytes = sum(size[m.bin] for m in moves) if size is not None else 0
        steps.append(MigrationStep(step=1, moves=tuple(moves), workers=workers, map_version=base_version,
                                   bytes=nbytes))
    steps.append(MigrationStep(step=len(steps) + 1, moves=(), workers=workers, map_version=base_version + len(steps),
                               merge_to=bins))
    return MigrationPlan("merge", "by-id", base_version, workers, workers, tuple(steps))


def settings_plan(base_version: int, workers: int, settings: Settings) -> MigrationPlan:
    """One settings step: the trigger interval and/or the records per epoch; nothing moves."""
    if not settings.to_dict():
        raise ValueError("a settings plan changes at least one setting")
    step = MigrationStep(step=1, moves=(), workers=workers, map_version=base_version, settings=settings)
    return MigrationPlan("settings", "by-id", base_version, workers, workers, (step,))


def upgrade_plan(base_version: int, workers: int, code: CodeVersion) -> MigrationPlan:
    """One upgrade step: another version of the processor goes into force; nothing moves."""
    step = MigrationStep(step=1, moves=(), workers=workers, map_version=base_version, code=code)
    return MigrationPlan("upgrade", "by-id", base_version, workers, workers, (step,))


def apply_moves(assignment: Sequence[int], moves: Sequence[Move]) -> list[int]:
    """The map after a step; refuses a move whose source is not the bin's owner (as the job does)."""
    out = list(assignment)
    for m in moves:
        if out[m.bin] != m.src:
            raise ValueError(f"bin {m.bin} is on worker {out[m.bin]}, not {m.src}")
        out[m.bin] = m.dst
    return out
