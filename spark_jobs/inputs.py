"""An epoch's input rows: one or more input topics, and exactly once across a chain's hand-off.

Several input topics (a join's two sides): the rows of all of them, each with `__source` = the
topic's position in the operator's input list (what a processor sees as its `source_column`).
Their (partition, offset) pairs can tie between topics, and the fold orders a key's rows by
(partition, offset): so with n > 1 inputs the partition column becomes `partition · n + source`,
which keeps the order deterministic on every replay.

Hand-off topics (a chain: the upstream operator's output is this operator's input): a replayed
upstream epoch re-emits its outputs under the same `ballast-id` (epoch:worker:seq), so this
operator drops the copies. Per (topic, partition, upstream worker) the records of one upstream
task attempt arrive in seq order (one idempotent producer per partition), and an epoch's
outputs are all written before the next epoch starts; so a record whose (epoch, seq) is not above
the high-water mark of what this operator already took is a copy. The mark after each epoch is
logged in `ballast/handoff/<epoch>.json`; a replay uses the mark of the newest earlier epoch, so
it filters exactly as the first run did. Copies inside one batch: the lowest offset is kept.
"""

from __future__ import annotations

import re
from typing import Any

from spark_jobs.storage import Location

Mark = dict[str, list[int]]  # "topic|partition|worker" -> [epoch, seq]
NO_EMPTY_PROPAGATION = "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"


class InputRows:
    """Select, tag and deduplicate the input rows of one epoch (module docstring)."""

    def __init__(self, topics: list[str], handoff: tuple[str, ...], journal_dir: Location) -> None:
        self.topics = list(topics)
        self.handoff = [t for t in handoff if t in topics]
        self.dir = journal_dir / "handoff"
        if self.handoff:
            self.dir.makedirs()

    def rows(self, df: Any, epoch: int) -> Any:
        """The batch's input rows: key, value, partition, offset (+ topic, __source) for `keyed`."""
        from pyspark.sql import functions as F

        src = df.where(F.col("topic").isin(self.topics))
        n = len(self.topics)
        source = F.array_position(F.array(*[F.lit(t) for t in self.topics]), F.col("topic")).cast("int") - 1
        src = src.withColumn("__source", source)
        if self.handoff:
            # the dedup's shuffles are query stages AQE may find empty (a batch of copies only, or a
            # step with no input): it must not drop the routing's W tasks with them
            src.sparkSession.conf.set("spark.sql.adaptive.optimizer.excludedRules", NO_EMPTY_PROPAGATION)
            src = self._deduplicate(src, epoch)
        if n > 1:
            src = src.withColumn("partition", F.col("partition") * n + F.col("__source"))
        return src

    # ------------------------------------------------------------------ hand-off dedup -------
    def _epochs(self) -> list[int]:
        return sorted(int(m.group(1)) for n in self.dir.list() if (m := re.fullmatch(r"(\d+)\.json", n)))

    def mark_before(self, epoch: int) -> Mark:
        earlier = [e for e in self._epochs() if e < epoch]
        doc = (self.dir / f"{earlier[-1]}.json").read_json() if earlier else None
        return dict(doc or {})

    def _deduplicate(self, src: Any, epoch: int) -> Any:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        rid = F.expr("filter(headers, h -> h.key = 'ballast-id')")[0]["value"].cast("string")
        parts = F.split(F.col("__id"), ":")
        tagged = (src.withColumn("__id", F.when(F.col("topic").isin(self.handoff), rid))
                  .withColumn("__e", parts[0].cast("long")).withColumn("__w", parts[1].cast("long"))
                  .withColumn("__s", parts[2].cast("long")))
        before = self.mark_before(epoch)
        rows = [(k.split("|")[0], int(k.split("|")[1]), int(k.split("|")[2]), int(v[0]), int(v[1]))
                for k, v in before.items()]
        marks = src.sparkSession.createDataFrame(rows, "m_topic string, m_part int, m_w long, m_e long, m_s long")
        joined = tagged.join(F.broadcast(marks), (F.col("topic") == F.col("m_topic"))
                             & (F.col("partition") == F.col("m_part")) & (F.col("__w") == F.col("m_w")), "left")
        new = (F.col("__id").isNull() | F.col("m_e").isNull() | (F.col("__e") > F.col("m_e"))
               | ((F.col("__e") == F.col("m_e")) & (F.col("__s") > F.col("m_s"))))
        first = Window.partitionBy("topic", "partition", "__id").orderBy("offset")
        kept = (joined.where(new).withColumn("__n", F.row_number().over(first))
                .where(F.col("__id").isNull() | (F.col("__n") == 1)))
        if not (self.dir / f"{epoch}.json").exists():
            self._write_mark(tagged, before, epoch)
        return kept.drop("m_topic", "m_part", "m_w", "m_e", "m_s", "__n", "__id", "__e", "__w", "__s")

    def _write_mark(self, tagged: Any, before: Mark, epoch: int) -> None:
        from pyspark.sql import functions as F

        agg = (tagged.where(F.col("__id").isNotNull()).groupBy("topic", "partition", "__w")
               .agg(F.max(F.struct("__e", "__s")).alias("m")).collect())
        mark = dict(before)
        for r in agg:
            k = f"{r['topic']}|{r['partition']}|{r['__w']}"
            new = [int(r["m"]["__e"]), int(r["m"]["__s"])]
            if k not in mark or tuple(new) > tuple(mark[k]):
                mark[k] = new
        (self.dir / f"{epoch}.json").write_json(mark)

    def gc(self, below: int) -> None:
        """Drop marks older than `below`, always keeping the newest (the next epoch's base)."""
        if not self.handoff:
            return
        epochs = self._epochs()
        for e in epochs[:-1]:
            if e < below:
                (self.dir / f"{e}.json").delete()
