"""The NEXMark queries written with Spark's own operators, the baseline of the NEXMark cost benchmark
(`python -m bench.nexmark_native --prefix P --queries q1,q5 ...`; bench/experiments/nexmark).

One Spark session runs the queries one after the other, each from the earliest offsets of the
writer's topics to what they hold at its start (`Trigger.availableNow`, in batches of at most
`--max-offsets` events), so every query reads the same backlog Ballast's jobs read. Each query
writes its answers to Kafka (`<prefix>.native.<query>`), as Ballast's jobs do: both pay the write.
Every finished batch's progress goes to `<progress-dir>/<query>.jsonl`; a query Spark refuses or
that fails is recorded in `<query>.error` and the next one runs.

| query | Spark's operators |
|---|---|
| Q1, Q2 | projection / selection on the bids |
| Q3 | stream-stream inner join persons ⋈ auctions on seller (no watermark: unbounded, as the model) |
| Q5 | windowed count per (sliding window, auction), then per window (`window_time` re-windowed) the top count(s) |
| Q7 | windowed aggregation per tumbling window: its maximum price and its bids, then every bid at |
|    | that price (all ties, as Ballast's Q7 and NEXMark's; the same shape as Q5's second aggregation) |
| Q8 | stream-stream inner join persons ⋈ auctions on (id = seller, tumbling window), watermarked |
| Q4, Q6 | `transformWithState` twice in one query: the winning bid per auction (event-time timer at |
|        | `expires`), then the average per category / seller; the Ballast query's own processor classes |
|        | under Spark's API (`spark_processor`) |

Both sides compute the same answers (tests/bench/test_nexmark_native.py compares these with
bench.nexmark.reference). The price of Q7's ties in Spark's operators: the aggregation's state holds
every bid of an open window (`collect_list`), as Flink's q7 (the window's max price joined back to
the bids) holds them in its join state; Ballast's processor keeps only the bids at the top price.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ballast.options import settings

#: each kind's share of the events (1:3:46): a source of some kinds reads that share of a batch
SHARE = {"person": 1 / 50, "auction": 3 / 50, "bid": 46 / 50}
QUERIES = ("q1", "q2", "q3", "q4", "q5", "q6", "q7", "q8")
WINNER_SCHEMA = "auction long, seller long, category long, expires long, price long, bidder long, date_time long"
#: state variables of the Ballast processors, typed for Spark (Ballast's state needs no schema)
STATE_SCHEMAS = {
    "auction": "date_time long, expires long, reserve long, seller long, category long",
    "best": "price long, date_time long, bidder long",
    "early": "price long, date_time long, bidder long",
    "sum": "total long, count long",
    "last": "expires long, auction long, price long",
}


def session(partitions: int) -> Any:
    from spark_jobs.session import build_spark

    return build_spark("bench-nexmark-native", conf={
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    })


class _Handle:
    """Ballast's snake_case handle calls on Spark's handle, with the state schemas Spark needs."""

    def __init__(self, handle: Any) -> None:
        self.h = handle

    def get_value_state(self, name: str) -> Any:
        return _State(self.h.getValueState(name, STATE_SCHEMAS[name]))

    def get_list_state(self, name: str) -> Any:
        return _State(self.h.getListState(name, STATE_SCHEMAS[name]))

    def register_timer(self, ms: int) -> None:
        self.h.registerTimer(int(ms))

    def delete_timer(self, ms: int) -> None:
        self.h.deleteTimer(int(ms))


class _State:
    """A Spark state variable under Ballast's names (values as tuples, as Ballast's state returns)."""

    def __init__(self, st: Any) -> None:
        self.st = st

    def exists(self) -> bool:
        return bool(self.st.exists())

    def get(self) -> Any:
        v = self.st.get()
        if v is None:
            return None
        return tuple(v) if not isinstance(v, Iterator) else [tuple(x) for x in v]

    def update(self, value: tuple) -> None:
        self.st.update(value)

    def clear(self) -> None:
        self.st.clear()

    def put(self, values: list) -> None:
        self.st.put(list(values))

    def append_value(self, value: tuple) -> None:
        self.st.appendValue(value)


class _Expired:
    def __init__(self, info: Any) -> None:
        self.info = info

    def get_expiry_time_in_ms(self) -> int:
        return int(self.info.getExpiryTimeInMs())


def spark_processor(cls: type, output_fields: tuple[str, ...], event_time_from: str | None = None) -> Any:
    """The Ballast query's own processor class under Spark's `StatefulProcessor` API; with
    `event_time_from`, each output row also gets `ts`, that field (ms) as a timestamp."""
    from datetime import UTC, datetime

    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Adapted(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.p = cls()
            self.p.init(_Handle(handle))

        def _rows(self, out: Any) -> Iterator[Any]:
            for d in out or ():
                row = {f: d[f] for f in output_fields}
                if event_time_from:
                    row["ts"] = datetime.fromtimestamp(d[event_time_from] / 1000, UTC)
                yield Row(**row)

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Iterator[Any]:  # noqa: N802, N803
            return self._rows(self.p.handle_input_rows(tuple(key), rows, timerValues))

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:  # noqa: N802, N803
            return self._rows(self.p.handle_expired_timer(tuple(key), timerValues, _Expired(expiredTimerInfo)))

        def close(self) -> None:
            pass

    return Adapted()


def build(spark: Any, q: str, prefix: str, bootstrap: str, max_offsets: int) -> Any:
    """Query `q` as a streaming DataFrame of answers (Spark's operators only)."""
    from pyspark.sql import functions as F

    from spark_jobs.nexmark import AUCTION, BID, LATENESS_MS, PERSON, SCHEMA

    lateness = f"{LATENESS_MS} milliseconds"

    def source(*kinds: str) -> Any:
        names = [f"{prefix}.{k}" for k in kinds]
        limit = max(1, math.ceil(max_offsets * sum(SHARE[k] for k in kinds)))
        df = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", ",".join(names)).option("startingOffsets", "earliest")
              .option("failOnDataLoss", "false").option("maxOffsetsPerTrigger", str(limit)).load())
        kind = F.when(F.col("topic") == f"{prefix}.person", PERSON).when(
            F.col("topic") == f"{prefix}.auction", AUCTION).otherwise(BID)
        return (df.select(kind.alias("kind"), F.from_json(F.col("value").cast("string"), SCHEMA).alias("r"))
                .select("kind", "r.*").withColumn("ts", F.timestamp_millis("date_time")))

    if q == "q1":
        return source("bid").select("auction", "bidder", F.expr("CAST(price * 89 DIV 100 AS BIGINT)").alias("price"),
                                    "date_time")
    if q == "q2":
        return source("bid").where("auction % 123 = 0").select("auction", "price")
    if q == "q3":
        p = source("person").where("state IN ('OR', 'ID', 'CA')").select(
            F.col("id").alias("p_id"), "name", "city", "state")
        a = source("auction").where("category = 10").select(F.col("id").alias("a_id"), "seller")
        return p.join(a, F.col("p_id") == F.col("seller")).select("name", "city", "state", F.col("a_id").alias("id"))
    def every_top(grouped: Any, by: str, *fields: str) -> Any:
        """Per window, every row whose `by` is the window's maximum (all ties): the window's rows
        collected with their maximum, then filtered by it (no Spark aggregate keeps only the ties)."""
        top = grouped.agg(F.max(by).alias("top"), F.collect_list(F.struct(by, *fields)).alias("all"))
        return top.select("window", F.explode(F.filter("all", lambda x: x[by] == F.col("top"))).alias("t"))

    if q == "q5":
        # Spark's chained window aggregations (the documented pattern: the second re-windows each
        # count by `window_time`, here a 5 s tumbling window [end - 5 s, end), one per sliding window)
        counts = (source("bid").withWatermark("ts", lateness)
                  .groupBy(F.window("ts", "10 seconds", "5 seconds"), "auction").count())
        top = every_top(counts.groupBy(F.window(F.window_time(counts.window), "5 seconds")), "count", "auction")
        return top.select((F.unix_millis(F.col("window.end")) - 10_000).alias("window_start"),
                          F.unix_millis(F.col("window.end")).alias("window_end"), "t.auction", "t.count")
    if q == "q7":
        # every bid at the window's top price, as Ballast's Q7 and the reference (NEXMark's Q7)
        top = every_top(source("bid").withWatermark("ts", lateness).groupBy(F.window("ts", "10 seconds")), "price",
                        "auction", "bidder", "date_time")
        return top.select(F.unix_millis(F.col("window.start")).alias("window_start"),
                          F.unix_millis(F.col("window.end")).alias("window_end"), "t.auction", "t.bidder", "t.price",
                          "t.date_time")
    if q == "q8":
        p = (source("person").withWatermark("ts", lateness)
             .select(F.col("id").alias("p_id"), "name", F.window("ts", "10 seconds").alias("pw")))
        a = (source("auction").withWatermark("ts", lateness)
             .select(F.col("id").alias("a_id"), "seller", "reserve", F.window("ts", "10 seconds").alias("aw")))
        j = p.join(a, (F.col("p_id") == F.col("seller")) & (F.col("pw") == F.col("aw")))
        return j.select(F.unix_millis(F.col("pw.start")).alias("window_start"),
                        F.unix_millis(F.col("pw.end")).alias("window_end"), F.col("p_id").alias("id"), "name",
                        "reserve", F.col("a_id").alias("auction"))
    if q in ("q4", "q6"):
        from spark_jobs.nexmark import winning as w

        rows = (source("auction", "bid")
                .withColumn("auction_id", F.expr(f"CASE WHEN kind = {AUCTION} THEN id ELSE auction END"))
                .withWatermark("ts", lateness))
        # a winner's event time is its auction's close (`expires`): the event-time column that lets
        # Spark chain the second stateful operator after the first (SPARK-47960)
        fields = tuple(f.split()[0] for f in WINNER_SCHEMA.split(", "))
        winners = rows.groupBy("auction_id").transformWithState(
            spark_processor(w.WinningBidProcessor, fields, event_time_from="expires"),
            f"{WINNER_SCHEMA}, ts timestamp", "Append", "EventTime", eventTimeColumnName="ts")
        if q == "q4":
            return winners.groupBy("category").transformWithState(
                spark_processor(w.CategoryAverageProcessor, ("category", "avg_price", "count")),
                "category long, avg_price long, count long", "Append", "None")
        return winners.groupBy("seller").transformWithState(
            spark_processor(w.SellerAverageProcessor, ("seller", "avg_price", "count")),
            "seller long, avg_price long, count long", "Append", "None")
    raise ValueError(f"unknown query {q!r}; one of {QUERIES}")


def run_query(spark: Any, a: argparse.Namespace, q: str) -> None:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming import StreamingQueryListener

    out = Path(a.progress_dir)
    prog = out / f"{q}.jsonl"
    fh = prog.open("a")

    class Progress(StreamingQueryListener):  # every finished batch, in order
        def onQueryStarted(self, event: Any) -> None:  # noqa: N802
            (out / f"{q}.started").write_text(str(time.time()))

        def onQueryProgress(self, event: Any) -> None:  # noqa: N802
            p = json.loads(event.progress.json)
            p["bench_seen_at"] = time.time()
            if not fh.closed:  # the listener bus may deliver after the query ended and we moved on
                fh.write(json.dumps(p) + "\n")
                fh.flush()

        def onQueryIdle(self, event: Any) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
            pass

    listener = Progress()
    spark.streams.addListener(listener)
    try:
        df = build(spark, q, a.prefix, a.bootstrap, a.max_offsets)
        sink = (df.select(F.to_json(F.struct(*df.columns)).alias("value")).writeStream.format("kafka")
                .option("kafka.bootstrap.servers", a.bootstrap).option("topic", f"{a.prefix}.native.{q}")
                .option("checkpointLocation", str(Path(a.checkpoint_root) / q)).outputMode("append")
                .trigger(availableNow=True))
        t0 = time.time()
        query = sink.start()
        query.awaitTermination(a.timeout_s)
        if query.isActive:
            query.stop()
            raise TimeoutError(f"{q} did not finish its backlog in {a.timeout_s:.0f}s")
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
        (out / f"{q}.done").write_text(json.dumps({"wall_s": time.time() - t0}))
    except Exception:  # noqa: BLE001 - one query Spark refuses must not stop the others
        (out / f"{q}.error").write_text(traceback.format_exc())
    finally:
        time.sleep(1.0)  # the listener bus is asynchronous: the last batch's progress may still be on its way
        spark.streams.removeListener(listener)
        fh.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.nexmark_native", description=__doc__.splitlines()[0])
    ap.add_argument("--prefix", required=True, help="the writer's topics <prefix>.person/.auction/.bid")
    ap.add_argument("--bootstrap", default=settings().kafka_bootstrap)
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--checkpoint-root", required=True)
    ap.add_argument("--progress-dir", required=True)
    ap.add_argument("--partitions", type=int, default=2, help="state partitions (Ballast: workers)")
    ap.add_argument("--max-offsets", type=int, default=20_000, help="events per batch, over every topic")
    ap.add_argument("--timeout-s", type=float, default=1800.0)
    a = ap.parse_args(argv)
    Path(a.progress_dir).mkdir(parents=True, exist_ok=True)
    spark = session(a.partitions)
    for q in [x for x in a.queries.split(",") if x]:
        run_query(spark, a, q)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
