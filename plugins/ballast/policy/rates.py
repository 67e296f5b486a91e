"""DS2's measurement: true processing rates per operator and the source's load, from metrics rows.

True rates count only the time an operator works (useful time), not the time it waits, which is
what lets DS2 size an operator in one step (docs/policy.md §1). Also here: the records the first
operator receives per source row, and the fixed per-batch overhead of Spark micro-batches.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Literal

from ballast.policy.dataflow import Dataflow, EpochMetrics, OperatorRates, SourceLoad, WorkerEpochMetrics

Aggregation = Literal["sum", "max"]

#: Fixed cost of one Spark micro-batch (docs/operations.md, "Traps": ~0.2-0.3 s on a 2-core machine).
DEFAULT_OVERHEAD_S = 0.25


def operator_rates(
    rows: Iterable[WorkerEpochMetrics], aggregation: Aggregation = "sum"
) -> dict[str, OperatorRates]:
    """True rates per operator over all epochs in `rows` (a window).

    `sum` is DS2's definition: o[λp] = Σ_k records_in_k / useful_k, per instance = o[λp] / p.
    `max` is the Flink autoscaler's: the busiest instance's useful time stands for all, i.e.
    per instance = Σ records_in / (p · max_k useful_k). It is the conservative choice under skew:
    in a micro-batch the stage ends when its slowest worker ends. Equal to `sum` when balanced.
    Workers with no useful time are idle instances: counted in p, they add no rate.
    """
    per_op: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0.0, 0.0]))
    for r in rows:
        acc = per_op[r.operator][r.worker]
        acc[0] += r.records_in
        acc[1] += r.records_out
        acc[2] += r.useful_ms / 1000.0
        acc[3] += r.wall_ms / 1000.0
    out: dict[str, OperatorRates] = {}
    for op, workers in per_op.items():
        p = len(workers)
        rin = sum(a[0] for a in workers.values())
        rout = sum(a[1] for a in workers.values())
        useful = [a[2] for a in workers.values()]
        wall = [a[3] for a in workers.values()]
        if max(useful) <= 0:
            continue  # rates undefined (DS2: W_u = 0); the caller keeps the current parallelism
        if aggregation == "sum":
            tr = sum(a[0] / a[2] for a in workers.values() if a[2] > 0)
            to = sum(a[1] / a[2] for a in workers.values() if a[2] > 0)
        elif aggregation == "max":
            tr = rin / max(useful)
            to = rout / max(useful)
        else:
            raise ValueError(f"unknown aggregation {aggregation!r}")
        out[op] = OperatorRates(
            operator=op,
            instances=p,
            true_rate_per_instance=tr / p,
            true_rate=tr,
            true_output_rate=to,
            observed_rate=rin / max(wall) if max(wall) > 0 else 0.0,
            selectivity=to / tr if tr > 0 else 0.0,
            useful_s=sum(useful),
            wall_s=sum(wall),
        )
    return out


def source_load(epochs: Sequence[EpochMetrics]) -> SourceLoad:
    """Mean arrival rate over the window and the latest backlog (what is still to catch up)."""
    if not epochs:
        raise ValueError("no epoch metrics")
    latest = max(epochs, key=lambda e: e.epoch)
    return SourceLoad(rate=sum(e.input_rate for e in epochs) / len(epochs), backlog=latest.backlog)


def source_expansion(flow: Dataflow, rows: Iterable[WorkerEpochMetrics], epochs: Sequence[EpochMetrics],
                     source: str) -> float:
    """Records the source's first operator receives per source row, measured over the window.

    Source rates are counted in input rows (Kafka offsets), operator rates in the records a worker
    folds. They differ when the key extractor flat-maps (word count: a sentence is many words);
    without this factor DS2 would under-provision such a job by the words per sentence.
    1.0 when unmeasured (no rows, or the first operator saw nothing).
    """
    firsts = {op.name for op in flow.operators if source in op.inputs}
    rows = [r for r in rows if r.operator in firsts]
    both = {e.epoch for e in epochs} & {r.epoch for r in rows}  # epochs measured on both sides
    got = sum(r.records_in for r in rows if r.epoch in both)
    sent = sum(e.input_rows for e in epochs if e.epoch in both)
    # two decimals: per-worker counts that do not add up exactly (a window edge) must not nudge
    # a 1:1 job's target rate by 0.04 % and with it a rounded-up parallelism
    return round(got / sent, 2) if got > 0 and sent > 0 else 1.0


def estimate_overhead_s(
    epochs: Sequence[EpochMetrics], rows: Iterable[WorkerEpochMetrics], default: float = DEFAULT_OVERHEAD_S
) -> float:
    """Fixed cost per batch = median over epochs of (batch time − Σ_stage slowest worker's wall).

    Why the median: a single GC pause or slow commit must not inflate the overhead of every batch.
    """
    stage_wall: dict[int, dict[str, float]] = defaultdict(dict)
    for r in rows:
        d = stage_wall[r.epoch]
        d[r.operator] = max(d.get(r.operator, 0.0), r.wall_ms / 1000.0)
    samples = sorted(
        max(0.0, e.batch_ms / 1000.0 - sum(stage_wall[e.epoch].values()))
        for e in epochs
        if e.epoch in stage_wall
    )
    if not samples:
        return default
    n = len(samples)
    return samples[n // 2] if n % 2 else (samples[n // 2 - 1] + samples[n // 2]) / 2
