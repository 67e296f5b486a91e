"""Each moving bin's move mode in a plan: transfer, pre-copy or handover (docs/handover.md, "Choosing a
move mode per bin"), from what the control plane knows: the bins' sizes and loads, the job's declared
window (the job row's config) and the cost model's a and b.

`choose_bin_modes` builds each bin's `BinCosts` and asks `handover.choose_mode`; the planner then
puts bins of different modes into separate steps (one flag per control step) and, since a handover
keeps the worker count, moves the bins of the step that changes W by pre-copy (`MoveModes.demote`).
Without a watermark in the metrics store, a handover's wait is estimated as the window's length +
the lateness at event-time rate 1, plus an epoch (`handover.estimated_wait_s`), and each reason
says so. Pure Python, no framework import.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ballast.policy.handover import MODES, BinCosts, Mode, ModeChoice, WindowSpec, choose_mode, estimated_wait_s

MoveMode = Literal["auto", "transfer", "precopy", "handover"]
MOVE_MODES: tuple[MoveMode, ...] = ("auto", *MODES)

__all__ = ["MOVE_MODES", "DeclaredWindow", "ModeBudgets", "MoveMode", "MoveModes", "changed_bytes_per_epoch",
           "choose_bin_modes"]


@dataclass(frozen=True)
class DeclaredWindow:
    """The windows a job's operator declares (`QuerySpec.window`) and its watermark's lateness, as the
    job row's config carries them (`window`: the WindowSpec's fields and `lateness_ms`)."""

    spec: WindowSpec
    lateness_ms: int = 0

    @classmethod
    def from_config(cls, doc: object) -> DeclaredWindow | None:
        """The job row's `window` entry; None when absent (no declared windows, or a job row written
        before the entry existed) or unreadable."""
        if not isinstance(doc, Mapping) or doc.get("length_ms") is None:
            return None
        try:
            spec = WindowSpec(int(doc["length_ms"]), _opt_int(doc.get("slide_ms")), int(doc.get("offset_ms") or 0),
                              _opt_int(doc.get("gap_ms")), bool(doc.get("staggered", False)))
            return cls(spec, int(doc.get("lateness_ms") or 0))
        except (TypeError, ValueError):
            return None

    def to_config(self) -> dict[str, Any]:
        s = self.spec
        return {"length_ms": s.length_ms, "slide_ms": s.slide_ms, "offset_ms": s.offset_ms, "gap_ms": s.gap_ms,
                "staggered": s.staggered, "lateness_ms": self.lateness_ms}

    @property
    def refusal(self) -> str:
        """Why the planner does not choose a handover of these windows on its own ('' when it may). A
        session handover waits until every key with rows since the step starts a new session or goes
        quiet: no bound, so only a manual run forces one (ballast_migrate's move_mode=handover)."""
        if self.spec.kind == "session":
            return (f"session windows (gap {self.spec.gap_ms} ms): a handover waits until every key with rows "
                    "since the step has started a new session or gone quiet, so a key that stays busy holds it "
                    "open with no bound on the wait; move_mode=handover forces one")
        return ""

    @property
    def unbounded(self) -> str:
        """What a forced handover's reason adds ('' for grid windows, whose wait is bounded)."""
        if self.spec.kind != "session":
            return ""
        return (f"; the wait is unbounded: at least the gap and the lateness (~{self.wait_s_estimate(0.0):.1f} s), "
                f"then as long as any key of the bins stays busy (no gap of {self.spec.gap_ms} ms between its rows)")

    def wait_s_estimate(self, epoch_s: float) -> float:
        """A handover's wait without a watermark (`handover.estimated_wait_s`), at event-time rate 1."""
        return estimated_wait_s(self.spec, self.lateness_ms, epoch_s)

    def describe(self) -> str:
        s = self.spec
        shape = (f"session gap {s.gap_ms} ms" if s.kind == "session" else f"{s.kind} {s.length_ms} ms"
                 + (f" every {s.slide} ms" if s.kind == "sliding" else ""))
        return f"{shape}, lateness {self.lateness_ms} ms"


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


@dataclass(frozen=True)
class ModeBudgets:
    """The cost model's a and b, the job's pause and step budgets, and its epoch (rebalance.*)."""

    a_ms: float
    b_ms_per_byte: float
    pause_budget_ms: float
    step_budget_s: float
    epoch_s: float


@dataclass(frozen=True)
class MoveModes:
    """The mode of every moving bin with its reason; `requested`: auto, or the mode a manual run forced."""

    requested: MoveMode
    costs: Mapping[int, BinCosts]
    choices: Mapping[int, ModeChoice]
    budgets: ModeBudgets

    def mode(self, b: int) -> Mode:
        c = self.choices.get(b)
        return c.mode if c is not None else "transfer"

    def cutover_bytes(self, b: int) -> int:
        """What the bin's cut-over loads: its state (transfer), one epoch's changes (pre-copy), nothing (handover)."""
        c = self.costs.get(b)
        if c is None:
            return 0
        mode = self.mode(b)
        return c.state_bytes if mode == "transfer" else int(c.changed_bytes_per_epoch) if mode == "precopy" else 0

    def bytes_moved(self, b: int) -> int:
        c = self.choices.get(b)
        return c.bytes_moved if c is not None else 0

    def wait_s(self, b: int) -> float:
        """A handover's wait until the old owner's last window closes (0 for the other modes)."""
        c = self.costs.get(b)
        return c.handover_wait_s if c is not None and self.mode(b) == "handover" else 0.0

    def demote(self, bins: Iterable[int], why: str) -> MoveModes:
        """These bins move by pre-copy instead of handover, `why` in their reason (a handover keeps the
        worker count, so the bins of the step that changes it cannot be handed over)."""
        bg, new = self.budgets, dict(self.choices)
        for b in bins:
            pre = choose_mode(self.costs[b], bg.b_ms_per_byte, bg.a_ms, bg.pause_budget_ms, bg.step_budget_s,
                              forced="precopy")
            new[b] = replace(pre, reason=f"pre-copy: {why}, which a handover cannot (it keeps the worker count); "
                                         f"instead of {self.choices[b].reason}")
        return replace(self, choices=new)

    def ordered(self) -> tuple[ModeChoice, ...]:
        return tuple(self.choices[b] for b in sorted(self.choices))


def changed_bytes_per_epoch(records_per_epoch: float, state_bytes: int, state_keys: int) -> float:
    """What a pre-copy's cut-over replays per epoch it waits: each record changes at most one key, of
    the bin's mean key size; never more than the bin (without a key count: the whole bin)."""
    if state_bytes <= 0 or records_per_epoch <= 0:
        return 0.0
    if state_keys <= 0:
        return float(state_bytes)
    return min(float(state_bytes), records_per_epoch * state_bytes / state_keys)


def choose_bin_modes(bins: Sequence[int], bin_bytes: Sequence[int], bin_keys: Sequence[int],
                     records_per_epoch: Sequence[float], window: DeclaredWindow | None, budgets: ModeBudgets,
                     requested: MoveMode = "auto") -> MoveModes:
    """Each of `bins`' mode by the cost model (or `requested`, when a manual run forces one). Raises
    ValueError with the core's reason for a forced handover the operator's windows do not allow."""
    if requested not in MOVE_MODES:
        raise ValueError(f"unknown move mode {requested!r}; expected one of {MOVE_MODES}")
    forced: Mode | None = None if requested == "auto" else requested
    wait = window.wait_s_estimate(budgets.epoch_s) if window is not None else 0.0
    costs = {b: BinCosts(b, int(bin_bytes[b]),
                         changed_bytes_per_epoch(records_per_epoch[b], int(bin_bytes[b]), int(bin_keys[b])),
                         windowed=window is not None, handover_wait_s=wait,
                         no_handover=window.refusal if window is not None and forced != "handover" else "")
             for b in bins}
    choices = {}
    for b, c in costs.items():
        ch = choose_mode(c, budgets.b_ms_per_byte, budgets.a_ms, budgets.pause_budget_ms, budgets.step_budget_s,
                         forced)
        if window is not None and window.unbounded and ch.mode == "handover":  # forced: sessions never auto
            ch = replace(ch, reason=ch.reason + window.unbounded)
        elif window is not None and not window.refusal and (ch.mode == "handover" or
                                                            (forced is None and ch.mode == "precopy")):
            ch = replace(ch, reason=f"{ch.reason}; the wait is estimated (~{wait:.1f} s): the window's "
                                    f"{window.describe()} at event-time rate 1, plus an epoch, since the metrics "
                                    "store records no watermark")
        choices[b] = ch
    return MoveModes(requested, costs, choices, budgets)
