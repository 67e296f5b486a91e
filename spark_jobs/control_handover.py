"""The control side of a handover (docs/handover.md): when a handover step starts, what its epochs
tell the tasks, and when it applies. Apart from spark_jobs.control, whose `decide` calls `gate`
for a due handover step and `epoch_handovers` once per epoch.

A handover step is due like any moves step and validated the same way. At the first epoch it is
due, its four timestamps are fixed from the event time the job has read (`HandoverClock`) and kept
in the control state (logged with the decision, so a replay reuses them); the step then waits in
the queue while both owners get the bins' rows. It applies at the first later epoch whose previous
epoch ran its timers at a watermark at or past the boundary: the old owner's last window has fired
and no row can reach it any more. A superseded or rejected handover ends the overlap; the old
owner folded every row, so it still holds the whole bin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from ballast.policy.handover import Handover, WindowSpec
from ballast.protocol import ControlStep
from spark_jobs.control_state import ControlState
from spark_jobs.handover import BinHandover

Gate = Literal["apply", "wait", "reject"]


@dataclass(frozen=True)
class HandoverClock:
    """What a handover's start and completion are judged by, as the runner knows it at an epoch."""

    window: WindowSpec | None  # the operator's declared windows (QuerySpec.window)
    event_max_ms: int | None  # the largest event time of the epochs before this one
    fired_upto_ms: int | None  # the watermark the epoch before ran its timers at (None: not known)


def clock_for(window: WindowSpec, event_max_before: Callable[[int], int | None],
              watermark_of: Callable[[int], int | None]) -> Callable[[int], HandoverClock]:
    """The runner's `HandoverClock` of an epoch: the event time read before it, and the watermark
    its previous epoch ran its timers at (spark_jobs.timers.ClockLog)."""
    return lambda epoch: HandoverClock(window, event_max_before(epoch), watermark_of(epoch - 1))


def gate(s: ControlStep, key: str, st: ControlState, epoch: int, clock: HandoverClock | None) -> tuple[Gate, str]:
    """What a due, valid handover step does at `epoch`, and why. Starting one records it in `st`."""
    ho = st.handover.get(key)
    if ho is None:
        window = clock.window if clock is not None else None
        if window is None:
            return "reject", ("a handover needs an operator that declares its windows (QuerySpec.window, "
                              "event time): move these bins by transfer or pre-copy")
        if window.kind == "session":
            return "reject", ("a handover of session windows is not built in the data plane yet "
                              "(docs/handover.md): move these bins by transfer or pre-copy")
        if s.workers != st.workers:
            return "reject", f"a handover keeps the worker count ({st.workers}); the step asks for {s.workers}"
        if clock is None or clock.event_max_ms is None:
            return "apply", "handover: the job has read no event yet, so the bins hold nothing: moved at once"
        h = Handover.at(window, clock.event_max_ms + 1)
        st.handover[key] = {"since": epoch, "migration": h.migration_ms, "activation": h.activation_ms,
                            "boundary": h.boundary_ms}
        return "wait", waiting_text(st.handover[key], None)
    fired = clock.fired_upto_ms if clock is not None else None
    if epoch > ho["since"] and fired is not None and fired >= ho["boundary"]:
        return "apply", (f"handover complete: the old owner's last window ended at {ho['boundary']} ms and the "
                         f"timers ran at watermark {fired} ms; 0 bytes of state moved")
    return "wait", waiting_text(ho, fired)


def progress(s: ControlStep, ho: dict[str, int], clock: HandoverClock | None) -> dict[str, Any]:
    """A waiting handover as the decision log's payload carries it to the console: its timestamps,
    both owners of each bin, the watermark and the old owner's windows still open (their ends lie
    in (watermark, boundary], one every slide; None while the watermark is not known)."""
    fired = clock.fired_upto_ms if clock is not None else None
    slide = clock.window.slide if clock is not None and clock.window is not None else None
    left = None if not slide or fired is None else max(0, -(-(ho["boundary"] - fired) // slide))
    return {**ho, "moves": [[m.bin, m.src, m.dst] for m in s.moves], "watermark": fired, "windows_left": left}


def waiting_text(ho: dict[str, int], fired: int | None) -> str:
    """A handover's progress as the decision log and the console say it."""
    at = "not known yet" if fired is None else f"{fired} ms"
    return (f"handover: both owners get the bins' rows since epoch {ho['since']}; the old owner finishes the "
            f"windows up to {ho['boundary']} ms (migration {ho['migration']} ms, the new owner's windows from "
            f"{ho['activation']} ms); the watermark is at {at}")


def epoch_handovers(st: ControlState, completed: tuple[ControlStep, dict[str, int]] | None) -> dict[str, Any] | None:
    """The decision's `handover`: every bin of an open handover, and those of the one completing now."""
    bins: list[list[int]] = []
    for q in st.queue:
        ho = st.handover.get(q.key)
        if ho is not None:
            bins += [_bin(m.bin, m.src, m.dst, ho, False) for m in q.step.moves]
    if completed is not None:
        s, ho = completed
        bins += [_bin(m.bin, m.src, m.dst, ho, True) for m in s.moves]
    return {"bins": bins} if bins else None


def _bin(b: int, src: int, dst: int, ho: dict[str, int], completes: bool) -> list[int]:
    return BinHandover(b, src, dst, ho["since"], ho["activation"], ho["boundary"], completes).to_list()
