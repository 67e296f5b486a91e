"""Stage 1, collect: the job as it is now (map, metrics window, per-bin load), or the open plan
this run must resume instead of deciding anew (its steps expect map versions a new plan would race)."""

from __future__ import annotations

import dataclasses
import logging

from ballast.config import JobConfig
from ballast.control.handoffs import BinLoad, EpochSample, MapState, OperatorSample, Resume, Snapshot, WorkerSample
from ballast.errors import BallastError
from ballast.policy import UsefulTime, bin_weights, folds_ms, useful_time
from ballast.store import (
    EpochRow,
    JobStore,
    MapSnapshot,
    PlanConflict,
    add_event,
    conflict_message,
    current_owner,
    open_plans,
    take_over_plan,
)
from ballast.store.traces import read_trace
from ballast.tracing import Trace, epochs_participation

log = logging.getLogger("ballast.control")


class NotReady(BallastError, RuntimeError):
    """Nothing to decide yet (job not running, no metrics, operator held by another run's plan)."""


def _same_dag(a: str, b: str) -> bool:
    """Two owners are runs of one DAG ("dag_id/run_id"); CLI owners never are."""
    return "/" in a and "/" in b and not a.startswith("cli:") and a.split("/", 1)[0] == b.split("/", 1)[0]


def open_plan_for(url: str, cfg: JobConfig, owner: str | None = None) -> Resume | None:
    """What a scheduled run does about an open plan of its operator: None (there is none), or resume it.

    Resumed: a plan this run owns, or one an earlier run of the same DAG left behind whose owner
    has not been seen for the lease (ballast.store.plans.OWNER_LEASE_S): that run is gone and the
    takeover is recorded (owner changes, `plan_taken_over` event). Anything else (a live owner, a
    manual plan, one awaiting approval) raises NotReady naming the plan, its owner and what to do:
    a stale manual plan is taken over only by a person (ballast_migrate take_over).
    """
    me = owner or current_owner()
    open_ = open_plans(url, cfg.job, cfg.operator)
    if not open_:
        return None
    p = open_[-1]
    if p.owner == me:
        return Resume(p.plan_id, f"plan {p.plan_id} ({p.status}) is this run's; resuming it")
    if p.status != "awaiting_approval" and _same_dag(p.owner, me) and not p.owner_alive():
        try:
            take_over_plan(url, p.plan_id, me)
        except PlanConflict as exc:
            raise NotReady(str(exc)) from exc
        msg = f"plan {p.plan_id} ({p.status}) was left by {p.owner}, not seen for the lease; {me} takes it over"
        add_event(url, cfg.job, cfg.operator, "warning", "plan_taken_over", msg, details={"plan_id": p.plan_id})
        return Resume(p.plan_id, msg)
    raise NotReady(conflict_message(p, f"a new decision of {me}"))


def current_state(url: str, cfg: JobConfig) -> tuple[MapSnapshot, BinLoad]:
    """The map in force and each bin's load/size over the rebalance window (manual plans need no more)."""
    store = JobStore(url, cfg.job, cfg.operator)
    current = store.latest_map()
    if current is None:
        raise NotReady(f"job {cfg.job}/{cfg.operator} has no routing map in the metrics DB yet: it has not run. "
                       "Start it with the ballast_supervise DAG.")
    st = store.bin_stats(current.bins, cfg.rebalance.window_epochs)
    return current, BinLoad(st.load, st.bytes, st.keys, st.epochs, st.fold_us)


def collect(url: str, cfg: JobConfig, owner: str | None = None) -> Snapshot | Resume:
    """The snapshot DS2 decides on: epochs that ran under the current map only (a window that
    straddles a change would mix two worker counts)."""
    resume = open_plan_for(url, cfg, owner)
    if resume is not None:
        return resume
    current, bins = current_state(url, cfg)
    store = JobStore(url, cfg.job, cfg.operator)
    epochs = [e for e in store.epoch_window(cfg.rebalance.window_epochs)
              if e.workers == current.workers and e.map_version == current.map_version]
    if not epochs:
        raise NotReady(f"no epoch of {cfg.job}/{cfg.operator} ran under the current map v{current.map_version} "
                       "yet; waiting for metrics")
    names = cfg.operator_names()
    trace = _window_trace(url, cfg, cfg.operator, epochs[0].epoch, epochs[-1].epoch)
    critical = _shares(trace)
    useful, workers = _worker_samples(cfg, store, epochs, trace)
    # bins hot on the critical path: weighed by their fold time when the workers' folds hold it
    w = bin_weights(bins.load, bins.fold_us, dict(critical), cfg.rebalance.critical_fold_share)
    bins = dataclasses.replace(bins, load=w.load, basis=w.basis, basis_reason=w.reason)
    trigger_ms, max_records = store.settings()
    return Snapshot(
        map=MapState(current.map_version, current.epoch, current.workers, current.assignment),
        bins=bins,
        epochs=_epoch_samples(epochs),
        workers=workers,
        latest_epoch=epochs[-1].epoch,
        flow=tuple(operator_sample(url, cfg, n) for n in names) if len(names) > 1 else (),
        critical=critical,
        trigger_ms=trigger_ms,
        max_records_per_epoch=max_records,
        useful_basis=useful.basis,
        useful_reason=useful.reason,
    )


def _window_trace(url: str, cfg: JobConfig, operator: str, first: int, last: int) -> Trace:
    """The stored traces of epochs [first, last]; empty without them (a job started before schema 0005)."""
    try:
        return read_trace(url, cfg.job, operator, first, last)
    except Exception as exc:  # a metrics DB not upgraded to 0005 yet: DS2 and the guards decide alone
        log.warning("job %s/%s: no epoch traces read (%s); `python -m ballast.store upgrade` adds their table",
                    cfg.job, operator, str(exc).splitlines()[0][:200])
        return Trace((), ())


def _shares(trace: Trace) -> tuple[tuple[str, float], ...]:
    """The window's critical participation by label (docs/tracing.md), largest first; () without
    stored traces (a job started before schema 0005, or a window of one epoch)."""
    if not trace.activities:
        return ()
    return tuple((k, round(v, 4)) for k, v in epochs_participation(trace).by("label").items())


def _worker_samples(cfg: JobConfig, store: JobStore, epochs: list[EpochRow],
                    trace: Trace) -> tuple[UsefulTime, tuple[WorkerSample, ...]]:
    """The workers' rows over the window, their useful time read from the traces' folds where those
    cover the window (docs/policy.md, "Useful time from the trace"), else their counters."""
    rows = store.worker_window([e.epoch for e in epochs])
    useful = useful_time({(w.epoch, w.worker): float(w.useful_ms) for w in rows},
                         folds_ms((a.epoch, a.timeline, a.kind, a.start_us, a.end_us)
                                  for a in trace.activities if a.epoch is not None),
                         cfg.rebalance.useful_from_trace, traced=bool(trace.activities))
    return useful, tuple(WorkerSample(w.epoch, w.worker, w.records_in, w.records_out,
                                      useful.ms[(w.epoch, w.worker)], w.wall_ms) for w in rows)


def _epoch_samples(rows: list[EpochRow]) -> tuple[EpochSample, ...]:
    return tuple(EpochSample(e.epoch, e.input_rows, e.batch_ms, e.input_rate or 0.0, e.backlog or 0) for e in rows)


def operator_sample(url: str, cfg: JobConfig, name: str) -> OperatorSample:
    """One operator of a multi-operator job over the rebalance window, under its current map:
    what DS2 needs to see it as its own node (true rate, selectivity = outputs / inputs). An
    operator that has not run yet is a node without measurements (DS2 keeps its W)."""
    store = JobStore(url, cfg.job, name)
    current = store.latest_map()
    if current is None:
        return OperatorSample(name, 1)
    epochs = [e for e in store.epoch_window(cfg.rebalance.window_epochs)
              if e.workers == current.workers and e.map_version == current.map_version]
    trace = _window_trace(url, cfg, name, epochs[0].epoch, epochs[-1].epoch) if epochs else Trace((), ())
    _, samples = _worker_samples(cfg, store, epochs, trace)
    return OperatorSample(name, current.workers, _epoch_samples(epochs), samples)
