"""Which of an epoch's JVM expressions are applied once, to the streaming DataFrame, and which per epoch.

Inside `foreachBatch` every DataFrame step is a new plan that Spark's driver analyses again, for
every batch: for a stateless NEXMark query that costs ~0.75 s of driver time per 5 000-event batch,
against ~35 ms when the same expressions are applied once to the streaming DataFrame, where Spark
analyses them once at the query's start and only plans each batch (`python -m bench.epoch_plan`).
So the runner streams `StreamPlan.stream(source)` and each epoch adds only `StreamPlan.epoch`:

* the input selection (spark_jobs.inputs) and the operator's epoch-free expressions: a stateless
  query's parse, filter, projection and format (`StatelessOperator.prepare`), a processor's parse
  and keying (`ProcessorOperator.prepare` / `key`), a fold operator's `keyed`: once, on the stream;
* per epoch: a stateless query's ids and headers (`finish`: they carry the epoch), and a
  pre-aggregating processor's late filter (it reads the epoch's clock) and its combine, which the
  routing applies after its shuffle (`combine`).

Inputs with a hand-off (a chain) are deduplicated against the journal's marks of the epochs
before, a per-epoch plan: such an operator builds all its expressions per epoch, as before.

The stream then carries the input topics' rows only. The control topic's records of an epoch are
read by the driver from the offset ranges Spark logged for it (spark_jobs.control_reader), the same
records on every replay, without a second Spark job over the batch.
"""

from __future__ import annotations

from typing import Any

from spark_jobs.inputs import InputRows
from spark_jobs.processing import ProcessorOperator
from spark_jobs.stateless import StatelessOperator


class StreamPlan:
    """Splits an operator's JVM plan between the stream (once) and the epoch (module docstring)."""

    def __init__(self, op: Any, inputs: InputRows, topics: list[str]) -> None:
        self.op, self.inputs, self.topics = op, inputs, list(topics)
        #: whether the epoch-free expressions are applied to the stream: not with a hand-off's per-epoch dedup
        self.once = not inputs.handoff
        #: a processor whose keying reads no clock is keyed on the stream too (else per epoch)
        self.key_once = self.once and isinstance(op, ProcessorOperator) and op.epoch_free
        #: a pre-aggregating processor's combine, which the routing applies after its shuffle
        #: (spark_jobs.pre_aggregate); None: the keyed rows are routed as they are
        self.combine = op.combine if isinstance(op, ProcessorOperator) and op.spec.pre_aggregate is not None else None

    def stream(self, source: Any) -> Any:
        """What the streaming query hands each epoch: the source's input rows through the epoch-free
        expressions, or (hand-off inputs) the source itself."""
        return self._front(self.inputs.rows(source, -1)) if self.once else source

    def epoch(self, df: Any, epoch: int, clock: Any = None, dead_column: bool = False) -> Any:
        """The epoch's rows: a stateless query's rows for its writer (plus `__dead` with `dead_column`),
        else the keyed rows to route. `df` is what `stream` made of the batch; `clock` a processor's
        EpochClock."""
        if not self.once:
            df = self._front(self.inputs.rows(df, epoch))
        if isinstance(self.op, StatelessOperator):
            return self.op.finish(df, dead_column)
        if isinstance(self.op, ProcessorOperator):
            return df if self.key_once else self.op.key(df, clock)
        return df

    def _front(self, rows: Any) -> Any:
        """The operator's expressions that do not depend on the epoch, over the selected input rows."""
        if isinstance(self.op, StatelessOperator):
            return self.op.prepare(rows, self.topics, ordered=not self.once)
        if isinstance(self.op, ProcessorOperator):
            prepared = self.op.prepare(rows)
            return self.op.key(prepared) if self.key_once else prepared
        return self.op.keyed(rows)
