"""Stage 2, evaluate: DS2 + guards (+ a skew check and a hot-bin check at equal worker count) →
a ScalingDecision.

`assess` is the pure evaluator (no DB): the DAG's `evaluate` and the DS2 benchmark
(bench/experiments/ds2.py, exp_ds2) both call it, so the benchmark exercises the code users run.
`evaluate` adds what lives in the metrics DB: the guards' state, the cluster's capacity, and the
stored decision ("no change" included).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ballast import policy
from ballast.config import JobConfig
from ballast.control.handoffs import Action, ScalingDecision, Snapshot, json_safe
from ballast.store import JobStore

log = logging.getLogger(__name__)

GUARD_STATE_KEY = "guard_state"


def guard_config(cfg: JobConfig, capacity: int | None = None) -> policy.GuardConfig:
    """The jobs file's bounds; the upper one also capped by what the cluster can run (the job
    reports its cluster's capacity in its heartbeat), never below the lower one."""
    rb = cfg.rebalance
    upper = cfg.max_workers if not capacity else max(cfg.min_workers, min(cfg.max_workers, capacity))
    return policy.GuardConfig(
        min_workers=cfg.min_workers, max_workers=upper, warmup_s=rb.warmup_s,
        warmup_epochs=rb.warmup_epochs, activation=rb.activation, target_utilization=rb.target_utilization,
        utilization_band=rb.utilization_band, scale_down_delay_s=rb.scale_down_delay_s,
    )


@dataclass(frozen=True)
class Assessment:
    """What DS2 and the guards say about one snapshot, before anything is stored."""

    action: Action
    reason: str
    current_workers: int
    proposed_workers: int
    target_workers: int
    utilization: float
    true_rate: float | None
    state: policy.GuardState  # the guards' state after this observation
    inputs: dict[str, Any] = field(default_factory=dict)
    target_bins: int | None = None  # action "split"
    settings: dict[str, int] | None = None  # action "tune"


def assess(cfg: JobConfig, snap: Snapshot, state: policy.GuardState, now: datetime,
           capacity: int | None = None) -> Assessment:
    """DS2 on the snapshot's window, the guards on DS2's answer, then a skew check when W stays."""
    rb = cfg.rebalance
    cur = snap.map.workers
    flow, rows, epochs, model = _dataflow(cfg, snap)
    # DS2 sizes for the same utilization the guards' band is centred on
    # a tuned job's budget is the interval the tuner set (in force now); otherwise the configured one
    budget_s = (snap.trigger_ms / 1000.0 if rb.latency_goal_ms and snap.trigger_ms else rb.batch_budget_s)
    res = policy.evaluate(flow, rows, epochs, model=model, batch_budget_s=budget_s,
                          catch_up_s=rb.catch_up_s, aggregation=rb.aggregation,
                          target_utilization=rb.target_utilization)
    target = res.targets[cfg.operator]
    rates = policy.operator_rates(rows, rb.aggregation)
    true_rate = rates[cfg.operator].true_rate if cfg.operator in rates else None
    utilization = res.utilization
    if snap.flow and target.per_instance_rate:  # this operator's own, not the busiest node's
        utilization = target.target_in_rate / (cur * target.per_instance_rate)
    obs = policy.Observation(now_s=now.timestamp(), epoch=snap.latest_epoch, current_workers=cur,
                             proposed_workers=target.parallelism, utilization=utilization, true_rate=true_rate)
    verdict, new_state = policy.evaluate_guards(obs, state, guard_config(cfg, capacity))
    action: Action = verdict.action
    reason = verdict.reason

    # a scale-up the critical path says would barely shorten the epochs is not worth its migration
    critical = dict(snap.critical)
    if critical:
        proposed = verdict.target_workers
        inputs_cp = {"critical.workers_share": round(policy.workers_share(critical), 4),
                     "critical.scale_up_gain": round(policy.scale_up_gain(critical, cur, proposed), 4)}
        note = (policy.critical_path_check(critical, cur, proposed, rb.critical_min_gain)
                if action == "scale_up" else None)
        if note:
            action, reason = "no_change", f"{reason}; but {note}"
    else:
        inputs_cp = {}
    # "no change" alone would hide a growing backlog: say why and what the operator can do
    diagnosis = res.note if not res.feasible else None
    if diagnosis is None and action == "no_change":
        diagnosis = policy.bottleneck_outside_operators(epochs, res.utilization,
                                                        below=rb.target_utilization - rb.utilization_band)
    if diagnosis:
        reason = f"{reason}; {diagnosis}"
        log.warning("job %s/%s: %s (set rebalance.batch_budget_s and the job's trigger interval together)",
                    cfg.job, cfg.operator, diagnosis)
    inputs: dict[str, Any] = {**verdict.inputs, **{f"ds2.{k}": v for k, v in res.inputs.items()},
                              "ds2.model": res.model, "ds2.feasible": res.feasible,
                              "ds2.advised_budget_s": res.advised_budget_s, "diagnosis": diagnosis,
                              "ds2.note": res.note or target.note, "map_version": snap.map.version,
                              "window_epochs": [e.epoch for e in snap.epochs], **inputs_cp,
                              "placement.basis": snap.bins.basis, "placement.basis_reason": snap.bins.basis_reason,
                              "useful.basis": snap.useful_basis, "useful.reason": snap.useful_reason}
    load = list(snap.bins.load)
    if action == "no_change" and cur > 1 and sum(load) > 0:
        old = list(snap.map.assignment)
        new = policy.place(old, cur, load, list(snap.bins.bytes))
        before = policy.placement_stats(old, old, cur, load)
        after = policy.placement_stats(old, new, cur, load, list(snap.bins.bytes))
        inputs.update({"skew_before": before.max_over_mean, "skew_after": after.max_over_mean})
        if before.max_over_mean > 1 + rb.skew_threshold and after.max_over_mean < before.max_over_mean - 0.05:
            action = "rebalance"
            reason = (f"{reason}; but worker loads are skewed (max/mean {before.max_over_mean:.2f} > "
                      f"{1 + rb.skew_threshold:.2f}): rebalance bins to {after.max_over_mean:.2f}")
    target_bins = None
    if action in ("no_change", "rebalance") and cur > 1 and sum(load) > 0:
        # a bin hotter than a worker's fair share bounds every placement: split it first (no key
        # moves); the next run places at the finer bins. A scaling action goes first, unsplit.
        adv = policy.split_advice(load, list(snap.bins.keys), cur, rb.skew_threshold, rb.max_bins)
        inputs.update({"split.advice": adv.reason, "split.hot_bin": adv.hot_bin, "split.hot_share": adv.hot_share})
        if adv.bins is not None:
            action, target_bins = "split", adv.bins
            reason = f"{reason}; {adv.reason}"
    settings = None
    if action == "no_change" and rb.latency_goal_ms and snap.trigger_ms is not None and res.model == "microbatch":
        # W stays: batch so that p99 meets the goal at the least cost per event (docs/policy.md, "Autotuning")
        per = target.per_instance_rate
        tail = policy.autotune.slow_epoch_factor([e.batch_ms for e in snap.epochs if e.input_rows > 0])
        tune = policy.autotune.advise(
            policy.autotune.TuneInputs(rate_rows_s=target.target_in_rate, overhead_s=float(res.inputs["overhead_s"]),
                                       per_row_s=1.0 / (cur * per) if per else 0.0, trigger_ms=snap.trigger_ms,
                                       max_records_per_epoch=snap.max_records_per_epoch,
                                       slow_epoch_factor=tail),
            policy.autotune.TuneConfig(latency_goal_ms=rb.latency_goal_ms, hold_s=rb.autotune_hold_s),
            now.timestamp(), state.last_change_at)
        inputs.update({"tune.trigger_ms": tune.trigger_ms, "tune.max_records_per_epoch": tune.max_records_per_epoch,
                       "tune.predicted_p99_ms": tune.predicted_p99_ms, "tune.current_p99_ms": tune.current_p99_ms,
                       "tune.feasible": tune.feasible, "tune.keep_up_ms": tune.keep_up_ms, "tune.reason": tune.reason,
                       "tune.slow_epoch_factor": round(tail, 3)})
        if tune.change:
            action, reason = "tune", f"{reason}; {tune.reason}"
            settings = {"trigger_ms": tune.trigger_ms, "max_records_per_epoch": tune.max_records_per_epoch}
    return Assessment(action, reason, cur, verdict.proposed_workers, verdict.target_workers, utilization,
                      true_rate, new_state, inputs, target_bins, settings)


def _dataflow(cfg: JobConfig, snap: Snapshot) -> tuple[policy.Dataflow, list[policy.WorkerEpochMetrics],
                                                       list[policy.EpochMetrics], Any]:
    """DS2's view: one node (the job's one operator), or every operator of a multi-operator job
    as its own node with its measured rates and selectivity, fed by the first operator's source.

    A chain's operators are separate streaming queries running side by side, each with its own
    micro-batches: DS2's pipelined model is the one that fits them (each node keeps up with the
    rate its upstream will send once scaled), not the micro-batch model's shared batch budget."""
    def worker_rows(name: str, samples: Any) -> list[policy.WorkerEpochMetrics]:
        return [policy.WorkerEpochMetrics(name, w.epoch, w.worker, w.records_in, w.records_out, w.useful_ms,
                                          w.wall_ms) for w in samples]

    def epoch_rows(samples: Any) -> list[policy.EpochMetrics]:
        return [policy.EpochMetrics(e.epoch, e.input_rows, e.batch_ms, e.input_rate, e.backlog) for e in samples]

    if not snap.flow:
        flow = policy.Dataflow.chain(cfg.input_topic, [(cfg.operator, snap.map.workers)])
        return flow, worker_rows(cfg.operator, snap.workers), epoch_rows(snap.epochs), cfg.rebalance.model
    nodes = [(o.name, snap.map.workers if o.name == cfg.operator else o.workers) for o in snap.flow]
    rows = [r for o in snap.flow
            for r in worker_rows(o.name, snap.workers if o.name == cfg.operator else o.samples)]
    first = snap.flow[0]
    source = epoch_rows(snap.epochs if first.name == cfg.operator else first.epochs)
    return policy.Dataflow.chain(cfg.input_topic, nodes), rows, source, "pipelined"


def guard_state(url: str, cfg: JobConfig) -> policy.GuardState:
    """Guard state lives in the latest decision's inputs; warm-up counts from the end of the last plan."""
    store = JobStore(url, cfg.job, cfg.operator)
    last = store.latest_decision()
    state = policy.GuardState.from_dict(last.inputs.get(GUARD_STATE_KEY) if last else None)
    done = store.last_finished_plan()
    if done and done.finished_at:
        fin = done.finished_at.timestamp()
        if state.last_change_at is None or fin > state.last_change_at:
            state.last_change_at = fin
            cps = store.checkpoints(done.plan_id)
            epochs = [c.applied_epoch for c in cps.values() if c.applied_epoch is not None]
            if epochs:
                state.last_change_epoch = max(epochs)
    return state


def evaluate(url: str, cfg: JobConfig, snap: Snapshot, now: datetime | None = None) -> ScalingDecision:
    """`assess` with the guards' stored state and the cluster's capacity; stores the decision."""
    now = now or datetime.now(UTC)
    store = JobStore(url, cfg.job, cfg.operator)
    hb = store.heartbeat()
    a = assess(cfg, snap, guard_state(url, cfg), now, hb.capacity if hb else None)
    inputs = {**a.inputs, GUARD_STATE_KEY: a.state.to_dict()}
    decision_id = store.save_decision(current_workers=a.current_workers, proposed_workers=a.proposed_workers,
                                      target_workers=a.target_workers, action=a.action, reason=a.reason,
                                      inputs=json_safe(inputs), at=now)
    log.info("decision #%d for %s/%s: %s (%d -> %d workers; DS2 proposes %d, utilization %.2f): %s",
             decision_id, cfg.job, cfg.operator, a.action, a.current_workers, a.target_workers,
             a.proposed_workers, a.utilization, a.reason)
    return ScalingDecision(decision_id, a.action, a.current_workers, a.proposed_workers, a.target_workers,
                           a.reason, json_safe(a.utilization), a.target_bins, a.settings)
