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

The mark is observed in the epoch's own Spark job where it can be (`observe`: a keyed operator with
transactional output, whose job ends in Ballast's transactional writer, a data source whose write
an `Observation` reports): one `max` per (topic, partition, upstream worker) the marks already
know, and the set of groups the batch holds; `after_job` writes it before the epoch's manifest.
A batch with a group the marks do not know yet (the first epochs, an upstream that scaled out) or
a job that ends in Kafka's sink (where an Observation never reports) reads the batch once more for
its mark, before the job (a `collect`: a second Spark job per epoch, which the trace shows in the
driver's `plan`).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from spark_jobs.sql_text import int_array, text
from spark_jobs.storage import Location

Mark = dict[str, list[int]]  # "topic|partition|worker" -> [epoch, seq]


def _group_sql(worker: str) -> str:
    """A row's mark group `topic|partition|worker` as SQL, `worker` the SQL of its (BIGINT) worker."""
    return f"concat_ws('|', topic, CAST(partition AS STRING), CAST({worker} AS STRING))"
NO_EMPTY_PROPAGATION = "org.apache.spark.sql.execution.adaptive.AQEPropagateEmptyRelation"
#: at most this many (topic, partition, upstream worker) groups are observed (one `max` each); more
#: are read by the collect
MAX_OBSERVED_GROUPS = 256


@dataclass
class _Observed:
    """An epoch's mark, being observed in its job: what `after_job` needs to write it."""

    epoch: int
    before: Mark
    groups: list[str]
    observation: Any  # pyspark.sql.Observation
    tagged: Any  # the rows with their ids, unobserved: the collect's input when a group is new


class InputRows:
    """Select, tag and deduplicate the input rows of one epoch (module docstring)."""

    def __init__(self, topics: list[str], handoff: tuple[str, ...], journal_dir: Location,
                 observe: bool = False) -> None:
        self.topics = list(topics)
        self.handoff = [t for t in handoff if t in topics]
        self.dir = journal_dir / "handoff"
        self.observe = observe  # the epoch's job ends in a data source write: its mark is observed there
        self._observed: _Observed | None = None
        self.collects = 0  # marks read by a collect of their own (a second job): tests and logs
        if self.handoff:
            self.dir.makedirs()

    def rows(self, df: Any, epoch: int) -> Any:
        """The batch's input rows: key, value, partition, offset (+ topic, __source) for `keyed`."""
        from pyspark.sql import functions as F

        names = ", ".join(text(t) for t in self.topics)
        n = len(self.topics)
        # SQL text: a hand-off's rows are built every epoch, and each Column made in Python is a Py4J call
        src = df.where(f"topic IN ({names})").selectExpr(
            "*", f"CAST(array_position(array({names}), topic) AS INT) - 1 AS __source")
        if self.handoff:
            # the dedup's shuffles are query stages AQE may find empty (a batch of copies only, or a
            # step with no input): it must not drop the routing's W tasks with them (if AQE is on at all:
            # spark_jobs.session.EPOCH_CONF turns it off for epochs)
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
        """The batch without the copies (module docstring), in five DataFrame steps of SQL text: the
        driver analyses each step again in every epoch (a step per tag column, a marks DataFrame
        joined in, and Python-built Columns took a chain's second operator 100-300 ms per epoch)."""
        handoff = ", ".join(text(t) for t in self.handoff)
        rid = f"IF(topic IN ({handoff}), CAST(filter(headers, h -> h.key = 'ballast-id')[0].value AS STRING), NULL)"
        before = self.mark_before(epoch)
        group = _group_sql(f"CAST(split({rid}, ':')[1] AS BIGINT)")
        tagged = src.selectExpr("*", f"{rid} AS __id", *[f"CAST(split({rid}, ':')[{i}] AS BIGINT) AS {c}"
                                                        for i, c in enumerate(("__e", "__w", "__s"))],
                                *self._marks_sql(before, group))
        self._observed = None
        observed = tagged
        if not (self.dir / f"{epoch}.json").exists():
            groups = sorted(before)
            if self.observe and 0 < len(groups) <= MAX_OBSERVED_GROUPS:
                observed = self._observe(tagged, epoch, before, groups)
            else:
                self._write_mark(tagged, before, epoch)
        new = "__id IS NULL OR __me IS NULL OR __e > __me OR (__e = __me AND __s > __ms)"
        return (observed.where(new)
                .selectExpr("*", "row_number() OVER (PARTITION BY topic, partition, __id ORDER BY offset) AS __n")
                .where("__id IS NULL OR __n = 1")  # copies inside the batch: the lowest offset is kept
                .selectExpr("* EXCEPT (__me, __ms, __n, __id, __e, __w, __s)"))

    @staticmethod
    def _marks_sql(before: Mark, group: str) -> tuple[str, str]:
        """`__me`, `__ms`: the mark's (epoch, seq) of the row's group, as SQL over map constants (null
        for a group the mark does not hold). Keys are `topic|partition|worker`: Kafka topic names and
        integers, so no comma or quote reaches the text; anything else is refused."""
        if not before:
            return "CAST(NULL AS BIGINT) AS __me", "CAST(NULL AS BIGINT) AS __ms"
        keys = sorted(before)
        bad = [k for k in keys if not re.fullmatch(r"[A-Za-z0-9._-]+\|\d+\|\d+", k)]
        if bad:
            raise ValueError(f"hand-off mark with unexpected groups {bad[:3]}: not topic|partition|worker")
        ks = "split('" + ",".join(keys) + "', ',')"
        me, ms = (f"map_from_arrays({ks}, {int_array((before[k][i] for k in keys), 'BIGINT')})[{group}]"
                  for i in (0, 1))
        return f"{me} AS __me", f"{ms} AS __ms"

    def _write_mark(self, tagged: Any, before: Mark, epoch: int) -> None:
        from pyspark.sql import functions as F

        self.collects += 1
        agg = (tagged.where(F.col("__id").isNotNull()).groupBy("topic", "partition", "__w")
               .agg(F.max(F.struct("__e", "__s")).alias("m")).collect())
        self._save_mark(before, {f"{r['topic']}|{r['partition']}|{r['__w']}": r["m"] for r in agg}, epoch)

    def _save_mark(self, before: Mark, found: dict[str, Any], epoch: int) -> None:
        """`before` raised by the batch's highest (epoch, seq) per group (`found`: group -> a row
        with `__e`, `__s`, or None), logged as the epoch's mark."""
        mark = dict(before)
        for k, m in found.items():
            if m is None:
                continue
            new = [int(m["__e"]), int(m["__s"])]
            if k not in mark or tuple(new) > tuple(mark[k]):
                mark[k] = new
        (self.dir / f"{epoch}.json").write_json(mark)

    def _observe(self, tagged: Any, epoch: int, before: Mark, groups: list[str]) -> Any:
        """`tagged` with the mark's aggregates observed in the epoch's job (module docstring)."""
        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        group = f"CASE WHEN __id IS NOT NULL THEN {_group_sql('__w')} END"
        obs = Observation(f"ballast_handoff_{epoch}_{uuid.uuid4().hex[:8]}")
        aggs = [F.expr(f"max(CASE WHEN {group} = {text(g)} THEN struct(__e, __s) END) AS g{i}")
                for i, g in enumerate(groups)]
        observed = tagged.observe(obs, F.expr(f"collect_set({group}) AS seen"), *aggs)
        self._observed = _Observed(epoch, before, groups, obs, tagged)
        return observed

    def after_job(self, epoch: int) -> None:
        """After the epoch's job ran: its observed mark logged (a batch with a group the marks did
        not know is read once more for it). Nothing to do when the mark was read before the job."""
        o, self._observed = self._observed, None
        if o is None or o.epoch != epoch or (self.dir / f"{epoch}.json").exists():
            return
        got = o.observation.get
        if not set(got["seen"] or ()) <= set(o.groups):
            self._write_mark(o.tagged, o.before, epoch)
            return
        self._save_mark(o.before, {g: got[f"g{i}"] for i, g in enumerate(o.groups)}, epoch)

    def gc(self, below: int) -> None:
        """Drop marks older than `below`, always keeping the newest (the next epoch's base)."""
        if not self.handoff:
            return
        epochs = self._epochs()
        for e in epochs[:-1]:
            if e < below:
                (self.dir / f"{e}.json").delete()
