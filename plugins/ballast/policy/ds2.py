"""DS2 evaluation: how many workers each operator needs, from true rates.

Two models share the same inputs and the same topological propagation of target rates:

* `ds2_pipelined` — DS2 as published (Kalavri et al., OSDI'18; Hoffmann thesis ch. 4): operators
  run concurrently, so each one only has to keep up with its own input rate (a max-over-operators
  model).
* `ds2_microbatch` — Ballast's adaptation to Spark micro-batches: the stages of an epoch run one
  after another and every epoch pays a fixed overhead, so the *sum* of the stage times plus the
  overhead must fit the batch time budget. Derivation in docs/policy.md.

Everything here is a pure function of plain dataclasses that mirror metrics DB rows, so the
Airflow DAG stays thin and the model is unit-tested in milliseconds. The inputs are in
`ballast.policy.dataflow`, the measured rates in `ballast.policy.rates`; their names are
re-exported here, the module callers import DS2 from.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ballast.policy.dataflow import (
    Dataflow,
    EpochMetrics,
    OperatorNode,
    OperatorRates,
    SourceLoad,
    WorkerEpochMetrics,
)
from ballast.policy.rates import (
    DEFAULT_OVERHEAD_S,
    Aggregation,
    estimate_overhead_s,
    operator_rates,
    source_expansion,
    source_load,
)

__all__ = [
    "DEFAULT_OVERHEAD_S", "Aggregation", "DS2Result", "Dataflow", "EpochMetrics", "OperatorNode", "OperatorRates",
    "OperatorTarget", "SourceLoad", "WorkerEpochMetrics", "advise_budget_s", "backlog_growth",
    "bottleneck_outside_operators", "ds2_microbatch", "ds2_pipelined", "estimate_overhead_s", "evaluate",
    "microbatch_duration_s", "microbatch_max_rate", "operator_rates", "source_expansion", "source_load",
]


def _ceil(x: float) -> int:
    """ceil that forgives float noise: 1e6/min / 1e5/min must give 10, not 11."""
    return max(0, math.ceil(x - 1e-9 * max(1.0, abs(x))))


@dataclass(frozen=True)
class OperatorTarget:
    """DS2's answer for one operator; `parallelism` is the raw proposal (before guards)."""

    operator: str
    current: int
    parallelism: int
    target_in_rate: float  # rows/s the operator must absorb
    target_out_rate: float  # rows/s it hands downstream at the target
    per_instance_rate: float | None  # None when unmeasured
    stage_s: float = 0.0  # micro-batch model: predicted stage time per batch at `parallelism`
    note: str = ""


@dataclass(frozen=True)
class DS2Result:
    """All targets of one decision plus the numbers a person needs to audit it."""

    model: Literal["pipelined", "microbatch"]
    targets: dict[str, OperatorTarget]
    utilization: float  # load / capacity at the current parallelism and target rates
    feasible: bool = True
    inputs: dict[str, float] = field(default_factory=dict)
    note: str = ""
    #: micro-batch model, infeasible only: the smallest batch budget (trigger interval) that would
    #: make room for the stage work again; see `advise_budget_s`
    advised_budget_s: float | None = None

    def parallelism(self) -> dict[str, int]:
        return {k: t.parallelism for k, t in self.targets.items()}


def _target_rates(
    flow: Dataflow, rates: Mapping[str, OperatorRates], sources: Mapping[str, SourceLoad], catch_up_s: float
) -> tuple[list[OperatorNode], dict[str, float], dict[str, float]]:
    """One topological pass: target input rate of each operator, DS2 eq. 4.6.

    Sources emit their target rate; an operator emits target_in · selectivity. An unmeasured
    operator passes its input through (selectivity 1) — the best guess, flagged in its note.
    """
    order = flow.topological_order()
    out_rate: dict[str, float] = {}
    in_rate: dict[str, float] = {}
    for s in flow.sources:
        if s not in sources:
            raise ValueError(f"no load for source {s!r}")
        out_rate[s] = sources[s].target_rate(catch_up_s)
    for op in order:
        lam = sum(out_rate[i] for i in op.inputs)
        in_rate[op.name] = lam
        sel = rates[op.name].selectivity if op.name in rates else 1.0
        out_rate[op.name] = lam * sel
    return order, in_rate, out_rate


def ds2_pipelined(
    flow: Dataflow,
    rates: Mapping[str, OperatorRates],
    sources: Mapping[str, SourceLoad],
    catch_up_s: float = 300.0,
    target_utilization: float = 1.0,
) -> DS2Result:
    """DS2 eq. 4.5: π_i = ⌈ λ_i / (r_i · u) ⌉ with λ_i from the topological pass.

    Correct for pipelined engines (Flink, Heron, Timely) where operators run concurrently; for
    Spark micro-batches use `ds2_microbatch`, which this under-provisions (see docs/policy.md).
    """
    if not 0 < target_utilization <= 1:
        raise ValueError("target_utilization must be in (0, 1]")
    order, lam, out = _target_rates(flow, rates, sources, catch_up_s)
    targets: dict[str, OperatorTarget] = {}
    util = 0.0
    for op in order:
        r = rates.get(op.name)
        if r is None or r.true_rate_per_instance <= 0:
            targets[op.name] = OperatorTarget(
                op.name, op.parallelism, op.parallelism, lam[op.name], out[op.name], None,
                note="no useful time measured; parallelism kept",
            )
            continue
        util = max(util, lam[op.name] / (op.parallelism * r.true_rate_per_instance))
        rate = r.true_rate_per_instance
        p = op.parallelism if not op.adjustable else max(1, _ceil(lam[op.name] / (rate * target_utilization)))
        targets[op.name] = OperatorTarget(op.name, op.parallelism, p, lam[op.name], out[op.name], rate)
    return DS2Result(
        "pipelined", targets, util,
        inputs={"catch_up_s": catch_up_s, "target_utilization": target_utilization},
    )


def ds2_microbatch(
    flow: Dataflow,
    rates: Mapping[str, OperatorRates],
    sources: Mapping[str, SourceLoad],
    batch_budget_s: float,
    overhead_s: float = DEFAULT_OVERHEAD_S,
    catch_up_s: float = 300.0,
    target_utilization: float = 1.0,
) -> DS2Result:
    """Parallelism for sequential stages sharing one batch time budget.

    With c_s = λ_s / (p_s r_s) (seconds of stage-s work per second of input), a batch of duration
    I carries λ·I rows and lasts T = o + I·Σ c_s; the job keeps up iff T ≤ I, i.e.
    Σ_s c_s ≤ 1 − o/I. We require Σ c_s ≤ β = u·(1 − o/I) minus the share of fixed stages and
    minimise Σ p_s: Lagrange gives p_s ∝ √a_s with a_s = λ_s / r_s, i.e.
    p_s = √a_s · Σ_t √a_t / β, then ceil (which only adds headroom). With one stage and o = 0
    this is DS2's formula. `batch_budget_s` is the trigger interval, or the target batch duration
    for an as-fast-as-possible trigger (same algebra: T = o / (1 − Σ c_s) ≤ budget).
    """
    if not 0 < target_utilization <= 1:
        raise ValueError("target_utilization must be in (0, 1]")
    if batch_budget_s <= 0:
        raise ValueError("batch_budget_s must be > 0")
    order, lam, out = _target_rates(flow, rates, sources, catch_up_s)
    share = 1.0 - overhead_s / batch_budget_s  # fraction of each batch left for stage work
    beta = target_utilization * share
    load_now = 0.0
    a: dict[str, float] = {}
    fixed: dict[str, float] = {}
    notes: dict[str, str] = {}
    for op in order:
        r = rates.get(op.name)
        if r is None or r.true_rate_per_instance <= 0:
            notes[op.name] = "no useful time measured; parallelism kept, its time not charged"
            continue
        c_now = lam[op.name] / (op.parallelism * r.true_rate_per_instance)
        load_now += c_now
        if op.adjustable:
            a[op.name] = lam[op.name] / r.true_rate_per_instance
        else:
            fixed[op.name] = c_now
    beta_adj = beta - sum(fixed.values())
    feasible = beta_adj > 0 or not a
    sq = sum(math.sqrt(v) for v in a.values())
    chosen: dict[str, int] = {}
    if feasible and a:
        chosen = {n: max(1, _ceil(math.sqrt(v) * sq / beta_adj)) if v > 0 else 1 for n, v in a.items()}
    targets: dict[str, OperatorTarget] = {}
    for op in order:
        r = rates.get(op.name)
        per = r.true_rate_per_instance if r and r.true_rate_per_instance > 0 else None
        p = chosen.get(op.name, op.parallelism)
        stage = (lam[op.name] * batch_budget_s) / (p * per) if per else 0.0
        targets[op.name] = OperatorTarget(
            op.name, op.parallelism, p, lam[op.name], out[op.name], per, stage_s=stage,
            note=notes.get(op.name, "" if feasible or op.name not in a else "infeasible; kept"),
        )
    advised = None if feasible else advise_budget_s(overhead_s, sum(fixed.values()), load_now, target_utilization)
    note = ""
    if not feasible:
        remedy = (f"raise the batch budget (the trigger interval) to at least {advised:.1f}s"
                  if advised is not None and math.isfinite(advised) else "no batch budget suffices")
        note = (f"infeasible: overhead {overhead_s:.3f}s and fixed stages leave no time in a "
                f"{batch_budget_s:.3f}s batch; {remedy}, or raise the fixed stages' parallelism")
    return DS2Result(
        "microbatch", targets,
        utilization=load_now / share if share > 0 else math.inf,
        feasible=feasible,
        inputs={
            "batch_budget_s": batch_budget_s, "overhead_s": overhead_s, "catch_up_s": catch_up_s,
            "target_utilization": target_utilization, "work_share_now": load_now, "beta": beta_adj,
        },
        note=note,
        advised_budget_s=advised,
    )


def backlog_growth(epochs: Sequence[EpochMetrics]) -> float:
    """Least-squares slope of the backlog over the window, in rows per epoch (> 0: falling behind).

    Why a slope: a single epoch's backlog jumps with the arrival pattern; a steady rise over the
    window is what says the job does not keep up. 0.0 with fewer than 3 epochs.
    """
    pts = sorted((e.epoch, float(e.backlog)) for e in epochs)
    n = len(pts)
    if n < 3:
        return 0.0
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0


def bottleneck_outside_operators(epochs: Sequence[EpochMetrics], utilization: float, below: float,
                                 min_growth_rows_per_s: float = 0.05) -> str | None:
    """A note when the backlog keeps growing although the operators are under-utilized.

    Then more workers would not help: the time goes to the engine's own per-batch and per-row work
    (Spark's read, shuffle and write stages, the driver), which the operator metrics do not see.
    Growth counts when the slope exceeds `min_growth_rows_per_s` of the arrival rate per second.
    """
    if not epochs or not math.isfinite(utilization) or utilization >= below:
        return None
    slope = backlog_growth(epochs)
    rate = sum(e.input_rate for e in epochs) / len(epochs)
    mean_batch_s = sum(e.batch_ms for e in epochs) / len(epochs) / 1000.0
    if rate <= 0 or slope <= min_growth_rows_per_s * rate * max(mean_batch_s, 1e-3):
        return None
    return (f"the backlog grows by {slope:,.0f} rows per epoch while the operators are only "
            f"{utilization:.0%} utilized: the bottleneck is outside the operators (Spark's own per-batch "
            f"work), so more workers would not help; a longer trigger interval amortises it")


def advise_budget_s(overhead_s: float, fixed_share: float, load_now: float, target_utilization: float = 1.0) -> float:
    """Smallest batch budget I that leaves room for stage work when the overhead fills the current one.

    A longer trigger interval amortises the fixed cost o over more rows: the work share left is
    u·(1 − o/I) − fixed. With c the adjustable stages' share at the current parallelism: if
    c ≤ (u − fixed)/2, the budget at which the current parallelism fits exactly, so no scaling is
    needed: I = u·o / (u − fixed − c). Beyond that the interval would grow without bound as c nears
    u − fixed, so we advise the one at which the overhead takes half of the usable share,
    I = 2·u·o / (u − fixed), and DS2 then sizes the stages to the other half (the two agree at
    c = (u − fixed)/2). Rounded up to 0.1 s. Infinite when the fixed stages alone exceed u.
    """
    u = target_utilization
    room = u - fixed_share
    if room <= 0:
        return math.inf
    adj = load_now - fixed_share  # the adjustable stages' share at the current parallelism
    exact = u * overhead_s / (room - min(max(adj, 0.0), room / 2))
    return math.ceil(exact * 10 - 1e-9) / 10


def microbatch_duration_s(
    source_rows: float,
    stages: Sequence[tuple[float, int, float]],
    overhead_s: float = DEFAULT_OVERHEAD_S,
) -> float:
    """T = o + Σ_s n_s / (p_s r_s) for one batch; stages are (selectivity from source, p, r).

    Stages run one after another; instances of a stage run in parallel (assumes at least p
    executor cores — the max_workers guard encodes that).
    """
    return overhead_s + sum(source_rows * sel / (p * r) for sel, p, r in stages)


def microbatch_max_rate(
    stages: Sequence[tuple[float, int, float]], batch_budget_s: float, overhead_s: float = DEFAULT_OVERHEAD_S
) -> float:
    """Largest source rate a configuration sustains within the budget: (1 − o/I) / Σ σ_s/(p_s r_s).

    Compare DS2's pipelined capacity min_s p_s r_s / σ_s: a sum of stage times, not a max.
    """
    per_row = sum(sel / (p * r) for sel, p, r in stages)
    return max(0.0, 1.0 - overhead_s / batch_budget_s) / per_row


def evaluate(
    flow: Dataflow,
    rows: Iterable[WorkerEpochMetrics],
    epochs: Sequence[EpochMetrics],
    *,
    source: str | None = None,
    model: Literal["pipelined", "microbatch"] = "microbatch",
    batch_budget_s: float = 1.0,
    overhead_s: float | None = None,
    catch_up_s: float = 300.0,
    target_utilization: float = 1.0,
    aggregation: Aggregation = "sum",
) -> DS2Result:
    """Metrics-DB rows in, DS2 decision out: the one call the evaluate task makes.

    The overhead is estimated from the rows when not given. Guards are applied afterwards by
    `ballast.policy.guards`; pass the guards' `target_utilization` here too, so that DS2 sizes
    for the same utilization the band is centred on (a proposal equal to the current count
    then means "inside the band").
    """
    rows = list(rows)
    rates = operator_rates(rows, aggregation)
    src = source or flow.sources[0]
    load = source_load(epochs)
    x = source_expansion(flow, rows, epochs, src)
    loads = {src: SourceLoad(load.rate * x, load.backlog * x)}
    if model == "pipelined":
        res = ds2_pipelined(flow, rates, loads, catch_up_s, target_utilization)
    else:
        o = estimate_overhead_s(epochs, rows) if overhead_s is None else overhead_s
        res = ds2_microbatch(flow, rates, loads, batch_budget_s, o, catch_up_s, target_utilization)
    res.inputs.update({"source_rate": load.rate, "backlog": load.backlog, "source_expansion": x})
    for name, r in rates.items():
        res.inputs[f"{name}.true_rate_per_instance"] = r.true_rate_per_instance
        res.inputs[f"{name}.selectivity"] = r.selectivity
    return res
