"""The control side of a handover (docs/handover.md): when a handover step starts, what its epochs
tell the tasks, and when it applies. Apart from spark_jobs.control, whose `decide` calls `gate`
for a due handover step and `epoch_handovers` once per epoch.

A handover step is due like any moves step and validated the same way. At the first epoch it is
due, its four timestamps are fixed from the event time the job has read (`HandoverClock`) and kept
in the control state (logged with the decision, so a replay reuses them); the step then waits in
the queue while both owners get the bins' rows. It applies at the first later epoch whose previous
epoch ran its timers at a watermark at or past the boundary: the old owner's last window has fired
and no row can reach it any more. Session windows also wait for every key the old owner may still
hold a session of (spark_jobs.handover_sessions): the step applies once the new owners' tasks of the
latest epoch that ran tasks reported no key open in the step's bins. Those reports are task metrics
in the epoch's changelog objects, read back through the manifest (`OpenKeys`), so a restarted driver
decides as the one before it would have; a replayed epoch reuses its logged decision. A handover of
grid windows runs to completion once started (`runs_on`); a rejected one, or a session handover a
newer plan supersedes, ends the overlap, and the old owner, which folded every row, still holds the
whole bin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
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
    # session windows: given the new owners, (the latest epoch before this one that ran tasks, bin ->
    # keys its new owner still had open) or None when no epoch did (`OpenKeys.latest`)
    open_keys: Callable[[frozenset[int]], tuple[int, dict[int, int]] | None] | None = field(default=None,
                                                                                            compare=False)


class OpenKeys:
    """The new owners' open session keys per bin (task metrics `handover_open`) of the latest committed
    epoch, read from its changelog objects' metadata through the manifest: the same after a driver
    restart. Read only while a session handover waits, once per (epoch, worker)."""

    def __init__(self, durable: Callable[[], Any]) -> None:
        self.durable = durable  # the runner's spark_jobs.durable.DurableState (None before its start)
        self._seen: dict[tuple[int, int], dict[int, int]] = {}

    def latest(self, before: int, workers: frozenset[int]) -> tuple[int, dict[int, int]] | None:
        from spark_jobs.objects import epoch_name, read_meta

        d = self.durable()
        prior = [e for e in (d.entries if d is not None else ()) if e.epoch < before]
        if not prior:
            return None
        e, counts = prior[-1], {}
        for w in sorted(workers):
            if (e.epoch, w) not in self._seen and w in e.changelog:
                meta = read_meta(d.loc / "changelog" / epoch_name(e.epoch) / e.changelog[w]).get("metrics", {})
                self._seen = {k: v for k, v in self._seen.items() if k[0] >= e.epoch - 2}
                self._seen[(e.epoch, w)] = {int(b): int(n) for b, n in (meta.get("handover_open") or {}).items()}
            counts.update(self._seen.get((e.epoch, w), {}))
        return e.epoch, counts


def clock_for(window: WindowSpec, durable: Callable[[], Any],
              watermark_of: Callable[[int], int | None]) -> Callable[[int], HandoverClock]:
    """The runner's `HandoverClock` of an epoch: the event time read before it (the manifests'),
    the watermark its previous epoch ran its timers at (spark_jobs.timers.ClockLog) and, for session
    windows, the new owners' open keys."""
    reports = OpenKeys(durable) if window.kind == "session" else None

    def at(epoch: int) -> HandoverClock:
        d = durable()
        return HandoverClock(window, d.event_max_before(epoch) if d is not None else None, watermark_of(epoch - 1),
                             (lambda ws: reports.latest(epoch, ws)) if reports is not None else None)

    return at


def gate(s: ControlStep, key: str, st: ControlState, epoch: int, clock: HandoverClock | None) -> tuple[Gate, str]:
    """What a due, valid handover step does at `epoch`, and why. Starting one records it in `st`."""
    ho = st.handover.get(key)
    if ho is None:
        window = clock.window if clock is not None else None
        if window is None:
            return "reject", ("a handover needs an operator that declares its windows (QuerySpec.window, "
                              "event time): move these bins by transfer or pre-copy")
        if s.workers != st.workers:
            return "reject", f"a handover keeps the worker count ({st.workers}); the step asks for {s.workers}"
        if clock is None or clock.event_max_ms is None:
            return "apply", "handover: the job has read no event yet, so the bins hold nothing: moved at once"
        h = Handover.at(window, clock.event_max_ms + 1)
        st.handover[key] = {"since": epoch, "migration": h.migration_ms, "activation": h.activation_ms,
                            "boundary": h.boundary_ms, **({"gap": window.gap_ms} if window.gap_ms else {})}
        return "wait", waiting_text(st.handover[key], None, keys_open(s, st.handover[key], None))
    fired = clock.fired_upto_ms if clock is not None else None
    if epoch > ho["since"] and complete(s, ho, clock):
        if "gap" in ho:
            return "apply", (f"handover complete: every session the old owner started before {ho['activation']} ms "
                             f"has closed (timers ran at watermark {fired} ms, no key open); 0 bytes of state moved")
        return "apply", (f"handover complete: the old owner's last window ended at {ho['boundary']} ms and the "
                         f"timers ran at watermark {fired} ms; 0 bytes of state moved")
    return "wait", waiting_text(ho, fired, keys_open(s, ho, clock))


def runs_on(ho: dict[str, int] | None) -> bool:
    """An open handover that nothing cancels: grid windows, whose old owner folds no row past its
    boundary (spark_jobs.handover_sessions.TaskHandovers.bounds), so neither owner holds the whole
    bin until it completes — within a window and the lateness. A newer plan is refused meanwhile
    (spark_jobs.control), with the watermark to wait for. A session handover (no bound on its wait)
    stays cancellable: its old owner folds every row, and a newer plan supersedes it."""
    return ho is not None and "gap" not in ho


def keys_open(s: ControlStep, ho: dict[str, int], clock: HandoverClock | None) -> int | None:
    """A session handover's keys still open in the step's bins, as their new owners reported them at the
    latest epoch since the step that ran tasks (0 when none did: no row reached the bins; 0 for grid
    windows); None while not known."""
    if "gap" not in ho:
        return 0
    if clock is None or clock.open_keys is None:
        return None
    got = clock.open_keys(frozenset(m.dst for m in s.moves))
    if got is None or got[0] < ho["since"]:
        return 0
    return sum(got[1].get(m.bin, 0) for m in s.moves)


def complete(s: ControlStep, ho: dict[str, int], clock: HandoverClock | None) -> bool:
    """The old owner holds nothing open: the timers ran at a watermark past the boundary and (sessions)
    no key is open (`keys_open`)."""
    fired = clock.fired_upto_ms if clock is not None else None
    return fired is not None and fired >= ho["boundary"] and keys_open(s, ho, clock) == 0


def progress(s: ControlStep, ho: dict[str, int], clock: HandoverClock | None) -> dict[str, Any]:
    """A waiting handover as the decision log's payload carries it to the console: its timestamps,
    both owners of each bin, the watermark and the old owner's windows still open (their ends lie
    in (watermark, boundary], one every slide; None while the watermark is not known)."""
    fired = clock.fired_upto_ms if clock is not None else None
    slide = clock.window.slide if clock is not None and clock.window is not None else None
    left = None if not slide or fired is None else max(0, -(-(ho["boundary"] - fired) // slide))
    sessions = {"keys_open": keys_open(s, ho, clock)} if "gap" in ho else {}
    return {**ho, "moves": [[m.bin, m.src, m.dst] for m in s.moves], "watermark": fired, "windows_left": left,
            **sessions}


def waiting_text(ho: dict[str, int], fired: int | None, open_: int | None = None) -> str:
    """A handover's progress as the decision log and the console say it (`open_`: a session
    handover's keys still open)."""
    at = "not known yet" if fired is None else f"{fired} ms"
    if "gap" not in ho:
        return (f"handover: both owners get the bins' rows since epoch {ho['since']}; the old owner finishes the "
                f"windows up to {ho['boundary']} ms (migration {ho['migration']} ms, the new owner's windows from "
                f"{ho['activation']} ms); the watermark is at {at}")
    keys = "not known yet" if open_ is None else f"{open_} key{'' if open_ == 1 else 's'}"
    return (f"handover: both owners get the bins' rows since epoch {ho['since']}; the old owner finishes the "
            f"sessions that start before {ho['boundary']} ms (migration {ho['migration']} ms, the new owner's "
            f"sessions from {ho['activation']} ms); the watermark is at {at}; keys still holding it open: {keys} "
            f"(each until it starts a session from {ho['activation']} ms on and the watermark reaches that, or "
            f"goes quiet for a gap of {ho['gap']} ms; a key that never goes quiet keeps the handover open)")


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
    return BinHandover(b, src, dst, ho["since"], ho["activation"], ho["boundary"], completes,
                       ho["migration"] if "gap" in ho else None).to_list()
