"""Control records → a per-epoch decision: which steps apply, are rejected, queued, superseded.
(The state it decides over and the decision it returns are spark_jobs.control_state.)

Pure Python and deterministic given (state before the epoch, the epoch's control records, `now`):
the runner logs the result durably before acting on it (spark_jobs.journal), and a replayed epoch
reuses the log instead of calling `decide` again (effective_at is compared with the wall clock,
so recomputing could differ).

Rules (docs/protocol.md has the full contract):
* malformed → rejected (Event row + ack, no checkpoint row: it has no (plan, step) to key on);
  ANY exception raised while judging a record (too large, nested too deeply, a bug) is such a
  rejection, with its reason: a control record can never fail an epoch;
* with a keyring (signed mode): unsigned, forged, unknown-key messages → rejected the same way
  (no checkpoint row: an unauthenticated message must not be able to block a (plan, step)); an
  authentic one issued more than `max_age_s` ago → rejected with a checkpoint row;
* for another operator of the same job (a multi-operator job's sibling) → skipped, no trace;
* for another job/operator → rejected the same way (a checkpoint row under our job would be
  misleading, and one under theirs is not ours to write);
* duplicate of a finished (plan, step) → idempotent: no new checkpoint row, the ack is re-echoed;
  duplicate of a queued step → ignored;
* a step of a plan older than the newest plan seen → superseded; a new plan supersedes every
  queued step of older plans;
* effective_at more than `max_future_s` ahead → rejected; otherwise queued until it is due;
* steps of a plan apply in order (step s waits for s-1; if s-1 was not applied, s is rejected);
* at most ONE step applies per epoch (Megaphone: one configuration per timestamp), so every
  map version is in force for at least one epoch and each checkpoint measures one step;
* a due step is validated against the job's state and either applied whole or rejected;
* every applied step — moves, map, noop (a move-less step may change the worker count), split or
  settings (the trigger interval, the records per epoch; the runner restarts its query) — creates
  exactly one new map version, so step i of a plan expects base + i - 1.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ballast.bin_maps import merge_assignment, split_assignment, unmerged_siblings
from ballast.protocol import (
    MAX_MESSAGE_BYTES,
    ControlStep,
    clip,
    describe_error,
    parse_document,
    step_from_document,
)
from ballast.signing import Keyring, SignatureError
from spark_jobs.control_handover import HandoverClock, complete, epoch_handovers, gate, progress, runs_on
from spark_jobs.control_state import AppliedStep, ControlState, Entry, EpochControl, QueuedStep, step_key

TICK_SCHEMA = "ballast.tick/v1"
KEEP_FINAL = 2000
KEEP_PLANS = 200


@dataclass
class ControlRecord:
    """One record of the control topic as consumed in an epoch."""

    offset: str  # "partition:offset"
    value: bytes | None


CodeCheck = Callable[[ControlStep, ControlState], "str | None"]
# what a code check answers while it runs beside the epochs (spark_jobs.live_code): the step waits
CODE_CHECK_PENDING = "the job is shipping the version and importing it on its driver and executors"


def validate(step: ControlStep, st: ControlState, check_code: CodeCheck | None = None) -> str | None:
    """Why `step` cannot apply to state `st` (None when it can). Checks everything before changing anything.

    The bin count is the map's (`len(st.assignment)`): a split step raises it, a merge lowers it.
    An upgrade step's code is judged by `check_code` (spark_jobs.live_code: it imports the version on
    the driver and the executors); without one, the job takes no upgrades."""
    bins = len(st.assignment)
    if step.map_version != st.map_version:
        return f"map version mismatch: step expects {step.map_version}, job is at {st.map_version}"
    w_before, w_after = st.workers, step.workers
    if step.kind == "split":
        if step.bins is None or step.bins <= bins:
            return f"a split must raise the bin count: the job has {bins} bins, the step asks for {step.bins}"
        if w_after != w_before:
            return f"a split keeps the worker count ({w_before}); the step asks for {w_after}"
        return None
    if step.kind == "merge":
        if step.bins is None or step.bins >= bins:
            return f"a merge must lower the bin count: the job has {bins} bins, the step asks for {step.bins}"
        if w_after != w_before:
            return f"a merge keeps the worker count ({w_before}); the step asks for {w_after}"
        if w_after > step.bins:
            return f"a merge to {step.bins} bins leaves fewer bins than the {w_after} workers"
        apart = unmerged_siblings(st.assignment, step.bins)
        if apart:
            b, ws = apart[0]
            return (f"a merge to {step.bins} bins joins bins whose parts share a worker; {len(apart)} do not "
                    f"(first: bin {b}, parts on workers {ws}): move them together in an earlier step")
        return None
    if step.kind == "settings":
        if w_after != w_before:
            return f"a settings step keeps the worker count ({w_before}); the step asks for {w_after}"
        return None
    if step.kind == "upgrade":
        if w_after != w_before:
            return f"an upgrade step keeps the worker count ({w_before}); the step asks for {w_after}"
        if check_code is None:
            return "this job's operator takes no live upgrade (only a stateful processor does)"
        return check_code(step, st)
    if w_after > bins:
        return f"workers after the step ({w_after}) exceed the number of bins ({bins})"
    limit = max(w_before, w_after)
    new = list(st.assignment)
    for m in step.moves:
        if not 0 <= m.bin < bins:
            return f"unknown bin {m.bin}: this job has bins 0..{bins - 1}"
        if new[m.bin] != m.src:
            return f"wrong source worker for bin {m.bin}: step says {m.src}, owner is {new[m.bin]}"
        if m.dst >= limit:
            return f"bin {m.bin} moves to worker {m.dst}, but workers must be < max(before, after) = {limit}"
        new[m.bin] = m.dst
    stranded = [b for b, w in enumerate(new) if w >= w_after]
    if stranded:
        b = stranded[0]
        return (f"after the step {len(stranded)} bin(s) (first: bin {b}) would sit on worker {new[b]} "
                f">= workers {w_after}")
    return None


def unfinished_plan(st: ControlState, other_than: str) -> str | None:
    """What says a plan other than `other_than` is under way (steps queued, or its last step not
    applied yet while the earlier ones were: a flow-controlled plan between two steps); None if none."""
    queued = [p for p in st.queued_plans if p != other_than]
    if queued:
        return f"plan {queued[0]} has steps queued"
    if not st.plans or st.plans[-1] == other_than:
        return None
    newest = st.plans[-1]
    done = {int(k.rsplit("#", 1)[1]): f for k, f in st.final.items() if k.rsplit("#", 1)[0] == newest}
    if done and all(f["status"] == "applied" for f in done.values()):
        last = max(done)
        if last < int(done[last].get("of", last)):  # journals before "of" existed: taken as finished
            return f"plan {newest} applied step {last} of {done[last]['of']}"
    return None


def _is_tick(raw: bytes | bytearray | None) -> bool:
    if not raw or len(raw) > 4096 or b"ballast.tick" not in raw:  # ticks are ~150 bytes
        return False
    try:
        doc = json.loads(raw)
    except Exception:  # RecursionError, UnicodeError, ValueError: not a tick; judged as a message
        return False
    return isinstance(doc, dict) and doc.get("schema") == TICK_SCHEMA


def tick_message(job: str, operator: str, at: datetime) -> bytes:
    """What the runner sends to its own control topic to get an epoch when only queued steps are due."""
    return json.dumps({"schema": TICK_SCHEMA, "job": job, "operator": operator, "at": at.isoformat()}).encode()


def has_due_step(st: ControlState, now: datetime, clock: HandoverClock | None = None) -> bool:
    """A queued step could apply at an epoch starting now (the runner ticks when no data comes).
    A handover is due once the last epoch ran its timers past its boundary (`clock`: the next
    epoch's HandoverClock); before that only input moves the watermark, and a tick cannot help."""
    for q in st.queue:
        s = q.step
        if q.key in st.handover:
            if complete(s, st.handover[q.key], clock):  # sessions: and no key open (control_handover)
                return True
            continue
        if s.effective_at <= now and (s.step == 1 or step_key(s.plan_id, s.step - 1) in st.final):
            return True  # a pre-copy step received in an earlier epoch has been warmed: due as well
    return False


def decide(
    state: ControlState, records: list[ControlRecord], *, epoch: int, now: datetime, job: str,
    operator: str, max_future_s: float, max_message_bytes: int = MAX_MESSAGE_BYTES,
    keyring: Keyring | None = None, siblings: frozenset[str] = frozenset(), check_code: CodeCheck | None = None,
    shadow_seen: dict[str, dict[str, Any]] | None = None, handover_clock: HandoverClock | None = None,
) -> EpochControl:
    """`siblings`: the job's other operators (a multi-operator job shares `<job>.control`): their
    steps are skipped here without a trace, the sibling they name decides them. The bin count is
    the map's (a split step raises it). `check_code`: judges an upgrade step's code (`validate`).
    `shadow_seen`: what the tasks of the epochs since the last decision compared for a shadow
    upgrade (spark_jobs.shadow), added to its tally here, so the decision that cuts over is logged
    with what it saw. `handover_clock`: what a handover step starts and completes by
    (spark_jobs.control_handover)."""
    st = copy.deepcopy(state)
    entries: list[Entry] = []
    for sk, seen in (shadow_seen or {}).items():
        if sk in st.shadow:
            st.shadow[sk] = add_seen(st.shadow[sk], seen)

    def add(action: str, plan_id: str, step: int, reason: str, offset: str, mjob: str = job,
            mop: str = operator, **kw: Any) -> None:
        entries.append(Entry(len(entries), action, plan_id, step, clip(reason), offset, mjob, mop, **kw))

    def finish(s: ControlStep, status: str, reason: str, offset: str, action: str) -> None:
        st.final[step_key(s.plan_id, s.step)] = {"status": status, "epoch": epoch, "reason": reason, "of": s.steps}
        st.shadow.pop(step_key(s.plan_id, s.step), None)
        st.handover.pop(step_key(s.plan_id, s.step), None)
        add(action, s.plan_id, s.step, reason, offset, checkpoint=True,
            map_version_after=st.map_version if status == "applied" else None, message=s.to_dict())

    received: set[str] = set()

    def judge(rec: ControlRecord) -> None:
        """One record: parse (size bound first), authenticate, then the rules above."""
        if _is_tick(rec.value):
            return
        doc = parse_document(rec.value, max_message_bytes)
        kid = keyring.authenticate(doc) if keyring is not None else None
        s = step_from_document(doc)
        if s.job == job and s.operator in siblings:
            return
        if s.job != job or s.operator != operator:
            why = (f"signed for {s.job}/{s.operator}, this is {job}/{operator}: replayed from another job?" if kid
                   else f"step is for {s.job}/{s.operator}, this is {job}/{operator}")
            add("reject", s.plan_id, s.step, why, rec.offset, mjob=s.job, mop=s.operator, checkpoint=False,
                event=True, message=s.to_dict())
            return
        sk = step_key(s.plan_id, s.step)
        if sk in st.final:
            f = st.final[sk]
            add("duplicate", s.plan_id, s.step, f"duplicate: already {f['status']} at epoch {f['epoch']}",
                rec.offset, checkpoint=False, reecho=True)
            return
        if any(q.key == sk for q in st.queue):
            add("duplicate", s.plan_id, s.step, "duplicate: already queued", rec.offset, checkpoint=False)
            return
        if keyring is not None and (expired := keyring.expired_reason(s.issued_at, now)):
            finish(s, "rejected", f"signed message (key id {kid}) {expired}", rec.offset, "reject")
            return
        if s.plan_id in st.plans and s.plan_id != st.plans[-1]:
            finish(s, "superseded", f"plan {s.plan_id} was superseded by plan {st.plans[-1]}", rec.offset, "supersede")
            return
        if (s.effective_at - now).total_seconds() > max_future_s:
            finish(s, "rejected", f"effective_at {s.effective_at.isoformat()} is more than {max_future_s:.0f}s "
                   "in the future", rec.offset, "reject")
            return
        if s.kind == "upgrade" and (busy := unfinished_plan(st, s.plan_id)):
            finish(s, "rejected", f"a migration is under way ({busy}): upgrade once it has finished",
                   rec.offset, "reject")
            return
        if s.plan_id not in st.plans and (held := [k for k, ho in st.handover.items() if runs_on(ho)]):
            finish(s, "rejected", f"handover {held[0]} is open and cannot be cancelled (its old owner folds no row "
                   f"past its windows' end): plan again once it completes, when the watermark reaches "
                   f"{st.handover[held[0]]['boundary']} ms", rec.offset, "reject")
            return
        if s.plan_id not in st.plans:
            for q in st.queue:
                finish(q.step, "superseded", f"superseded by newer plan {s.plan_id}", q.offset, "supersede")
            st.queue = []
            st.plans = (st.plans + [s.plan_id])[-KEEP_PLANS:]
        if s.code is not None and s.code.shadow is not None:
            st.shadow[sk] = add_seen({}, {})
        st.queue.append(QueuedStep(s, rec.offset, epoch))
        received.add(sk)

    # 1) the epoch's new control records, in topic order; whatever one raises, it is rejected
    # alone: the state is rolled back to before it and the epoch goes on
    for rec in records:
        saved = (len(entries), dict(st.final), list(st.queue), list(st.plans), set(received))
        try:
            judge(rec)
        except Exception as exc:
            del entries[saved[0]:]
            st.final, st.queue, st.plans, received = saved[1], saved[2], saved[3], saved[4]
            kind = "rejected signature" if isinstance(exc, SignatureError) else "malformed control message"
            add("reject", "", 0, f"{kind}: {describe_error(exc)}", rec.offset, checkpoint=False, event=True)

    # 2) the queue: apply at most one due step, in order
    applied: AppliedStep | None = None
    remaining: list[QueuedStep] = []
    waiting: dict[str, str] = {}
    shadow_now: dict[str, Any] | None = None
    completed: tuple[ControlStep, dict[str, int]] | None = None  # a handover that applies now
    for q in st.queue:
        s, sk = q.step, q.key
        if applied is not None:
            remaining.append(q)
            waiting[sk] = f"waits: step {applied.plan_id}#{applied.step} applies at this epoch"
            continue
        if s.effective_at > now:
            remaining.append(q)
            waiting[sk] = f"queued until effective_at {s.effective_at.isoformat()}"
            continue
        if s.precopy and q.epoch >= epoch:
            remaining.append(q)
            waiting[sk] = "pre-copy: the new owners warm its bins in this epoch; cut-over at a later one"
            continue
        if s.step > 1:
            prev = st.final.get(step_key(s.plan_id, s.step - 1))
            if prev is None:
                remaining.append(q)
                waiting[sk] = f"waits for step {s.step - 1} of plan {s.plan_id}"
                continue
            if prev["status"] != "applied":
                finish(s, "rejected", f"step {s.step - 1} of plan {s.plan_id} was {prev['status']}", q.offset,
                       "reject")
                continue
        err = validate(s, st, check_code)
        if err == CODE_CHECK_PENDING:  # an upgrade's code is judged beside the epochs: it waits meanwhile
            remaining.append(q)
            waiting[sk] = err
            continue
        if err:
            finish(s, "rejected", err, q.offset, "reject")
            continue
        cut_reason = ""
        if s.handover:  # waits in the queue while both owners get the bins' rows
            gated, why = gate(s, sk, st, epoch, handover_clock)
            if gated == "reject":
                finish(s, "rejected", why, q.offset, "reject")
                continue
            if gated == "wait":
                remaining.append(q)
                waiting[sk] = why
                continue
            cut_reason = ("; " if s.reason else "") + why
            if sk in st.handover:
                completed = (s, st.handover[sk])
        if s.code is not None and (spec := s.code.shadow) is not None:  # tried beside the version in force first
            seen = st.shadow.setdefault(sk, add_seen({}, {}))
            if seen["epochs"] < spec.epochs:
                remaining.append(q)
                waiting[sk] = shadow_text(seen, spec.epochs)
                shadow_now = {"step": sk, "code": s.code.to_dict(), "fields": list(spec.fields)}
                continue
            bad = seen["differ"] + seen["errors"]
            if bad > spec.tolerance * seen["calls"]:
                finish(s, "rejected", f"{shadow_text(seen, spec.epochs)} (tolerance {spec.tolerance:g}), e.g. "
                       f"{seen['example']}: the version in force runs on", q.offset, "reject")
                continue
            cut_reason = ("; " if s.reason else "") + f"{shadow_text(seen, spec.epochs)}: cut over"
        before = (st.map_version, st.workers, list(st.assignment))
        if s.kind == "split" and s.bins is not None:
            st.assignment = split_assignment(st.assignment, s.bins)
        elif s.kind == "merge" and s.bins is not None:
            st.assignment = merge_assignment(st.assignment, s.bins)
        for m in s.moves:
            st.assignment[m.bin] = m.dst
        if s.settings is not None:
            st.settings = s.settings.over(st.settings)
        if s.code is not None:
            st.code = [*st.code, s.code.entry]
        st.workers = s.workers
        st.map_version += 1  # every applied step is one new map version (the planner counts on it)
        applied = AppliedStep(s.plan_id, s.step, s.kind, s.moves, workers_before=before[1], workers=st.workers,
                              bins_before=len(before[2]), bins=len(st.assignment), map_version_before=before[0],
                              map_version_after=st.map_version)
        finish(s, "applied", s.reason + cut_reason, q.offset, "apply")
    st.queue = remaining
    for q in remaining:
        if q.key in received or q.key in st.shadow or q.key in st.handover:  # their progress every epoch
            ho = st.handover.get(q.key)
            add("queue", q.step.plan_id, q.step.step, waiting.get(q.key, "queued"), q.offset, checkpoint=False,
                handover=progress(q.step, ho, handover_clock) if ho is not None else None)
    if len(st.final) > KEEP_FINAL:
        st.final = dict(list(st.final.items())[-KEEP_FINAL:])
    return EpochControl(
        epoch=epoch, decided_at=now.isoformat(), entries=entries, state_after=st,
        map_version_before=state.map_version, workers_before=state.workers, applied=applied,
        warm=warm_plan(st), shadow=shadow_now, handover=epoch_handovers(st, completed),
    )


def add_seen(tally: dict[str, Any], seen: dict[str, Any]) -> dict[str, Any]:
    """A shadow's tally with what the tasks compared since (`seen`: calls, differ, errors, example and
    `epochs`, the epochs that compared a call; without it, one such epoch if it has calls). A call
    that raised is a call too, so a version that raises on everything reaches its epochs and is
    rejected."""
    return {"epochs": tally.get("epochs", 0) + int(seen.get("epochs", 1 if seen.get("calls") else 0)),
            **{k: tally.get(k, 0) + int(seen.get(k, 0)) for k in ("calls", "differ", "errors")},
            "example": tally.get("example") or clip(str(seen.get("example") or ""), 300)}


def shadow_text(seen: dict[str, Any], epochs: int) -> str:
    """A shadow's progress as the decision log, the checkpoint and the console say it."""
    return (f"shadow: {seen['epochs']} of {epochs} epochs with input, {seen['calls']} handler calls compared, "
            f"{seen['differ']} differ, {seen['errors']} raised")


def warm_plan(st: ControlState) -> dict[str, list[int]]:
    """worker -> bins its task pre-copies this epoch: the incoming bins of every queued pre-copy
    step (Kafka Streams' warm-up replicas): at the cut-over only the changes since are replayed."""
    warm: dict[str, set[int]] = {}
    bins = len(st.assignment)
    for q in st.queue:
        if not q.step.precopy:
            continue
        for m in q.step.moves:
            if 0 <= m.bin < bins:
                warm.setdefault(str(m.dst), set()).add(m.bin)
    return {w: sorted(bs) for w, bs in sorted(warm.items())}
