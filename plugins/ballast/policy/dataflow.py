"""What DS2 reads: the job's dataflow (sources and operators) and the metrics DB rows of a window.

Plain frozen dataclasses that mirror metrics DB rows, so the evaluation (ballast.policy.ds2)
stays a pure function and is unit-tested in milliseconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerEpochMetrics:
    """One metrics DB row: what worker `worker` of `operator` did in epoch `epoch`."""

    operator: str
    epoch: int
    worker: int
    records_in: int
    records_out: int
    useful_ms: float  # time inside the operator's work, excluding waiting
    wall_ms: float


@dataclass(frozen=True)
class EpochMetrics:
    """One metrics DB row per epoch: the source side, measured independently of backpressure."""

    epoch: int
    input_rows: int
    batch_ms: float
    input_rate: float  # rows/s from Kafka end-offset growth (what arrives, not what we read)
    backlog: int  # rows not yet read at the end of the epoch


@dataclass(frozen=True)
class OperatorNode:
    """An operator of the job's dataflow; `inputs` names sources or upstream operators.

    `adjustable=False` marks a stage whose parallelism Ballast does not control (e.g. the Kafka
    read stage): the micro-batch model charges its time to the budget but never resizes it.
    """

    name: str
    inputs: tuple[str, ...]
    parallelism: int
    adjustable: bool = True


@dataclass(frozen=True)
class Dataflow:
    """Sources plus operators forming a DAG (today: one source and a chain)."""

    sources: tuple[str, ...]
    operators: tuple[OperatorNode, ...]

    @staticmethod
    def chain(source: str, operators: Sequence[tuple[str, int]]) -> Dataflow:
        """source -> op1 -> op2 ...; `operators` are (name, current parallelism)."""
        nodes, prev = [], source
        for name, p in operators:
            nodes.append(OperatorNode(name, (prev,), p))
            prev = name
        return Dataflow((source,), tuple(nodes))

    def node(self, name: str) -> OperatorNode:
        for op in self.operators:
            if op.name == name:
                return op
        raise KeyError(name)

    def topological_order(self) -> list[OperatorNode]:
        """Kahn's algorithm; ties broken by declaration order so results are deterministic."""
        names = [op.name for op in self.operators]
        known = set(names) | set(self.sources)
        if len(set(names)) != len(names) or set(names) & set(self.sources):
            raise ValueError("operator and source names must be unique")
        for op in self.operators:
            for i in op.inputs:
                if i not in known:
                    raise ValueError(f"operator {op.name!r} reads unknown input {i!r}")
        done: set[str] = set(self.sources)
        order: list[OperatorNode] = []
        pending = list(self.operators)
        while pending:
            ready = [op for op in pending if all(i in done for i in op.inputs)]
            if not ready:
                raise ValueError("dataflow has a cycle")
            op = ready[0]
            order.append(op)
            done.add(op.name)
            pending.remove(op)
        return order


@dataclass(frozen=True)
class SourceLoad:
    """What a source must be served at: its arrival rate and the backlog to catch up on."""

    rate: float  # rows/s
    backlog: float = 0.0  # rows

    def target_rate(self, catch_up_s: float) -> float:
        """DS2's source rate plus Flink's catch-up term: drain the backlog within catch_up_s."""
        return self.rate + (self.backlog / catch_up_s if catch_up_s > 0 else 0.0)


@dataclass(frozen=True)
class OperatorRates:
    """Measured rates of one operator over a window of epochs (rows/s)."""

    operator: str
    instances: int
    true_rate_per_instance: float  # capacity of one instance, rows in / useful second
    true_rate: float  # o[λp]: sum over instances (or instances * per-instance for "max")
    true_output_rate: float  # o[λo]
    observed_rate: float  # rows in / wall second of the busiest instance (<= true rate)
    selectivity: float  # o[λo] / o[λp]: rows out per row in
    useful_s: float
    wall_s: float
