"""A processor written for Spark's `transformWithState` gives the same output under Spark's own
operator and under Ballast, where only its import and the query's start differ."""

from __future__ import annotations

import json
import time

import pytest

from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dp_helpers import produce
from tests.helpers.wait import wait_until
from tests.helpers.window_helpers import EXAMPLES, as_tuple, events, flush_record, records, reference

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

SPARK_IMPORT = "from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle"
BALLAST_IMPORT = "from spark_jobs.processor import StatefulProcessor, StatefulProcessorHandle"


def test_spark_processor_ported_to_ballast_gives_spark_output(spark, kafka_bootstrap, make_topics, unique_name,
                                                               tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    evs = events(3000, users=12, seed=3)
    keys, values = records(evs)
    produce(kafka_bootstrap, topic, keys, 2, values)

    # the port: the same file with its import changed, started by Ballast
    src = (EXAMPLES / "window_counts.py").read_text()
    assert SPARK_IMPORT in src
    ported = tmp_path / "ported_window_counts.py"
    ported.write_text(src.replace(SPARK_IMPORT, BALLAST_IMPORT))
    spark.sparkContext.addPyFile(str(ported))
    spark.sparkContext.addPyFile(str(EXAMPLES / "window_counts.py"))
    cfg = RunConfig(job=job, operator="ported_window_counts:WindowCounts", input_topic=topic,
                    checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap, db_url=db_url, bins=8,
                    workers=2, trigger_ms=200, max_offsets_per_trigger=700)
    import sys

    sys.path.insert(0, str(tmp_path))
    t0 = time.time()
    runner = start_job(spark, cfg)
    ckpt = cfg.checkpoint_dir + "/spark"
    expected = reference(evs)
    try:
        wait_until(lambda: (e := committed_epochs(ckpt)) and sum(read_end_offsets(ckpt, e[-1]).get(topic, {}).values())
                   == len(evs), 300, "all input consumed")
        fk, fv = flush_record(evs)
        produce(kafka_bootstrap, topic, fk, 1, fv)  # after the rest: nothing becomes late because of it

        def ballast_out() -> list:
            return sorted(as_tuple(json.loads(o.value)) for o in read_output(kafka_bootstrap, f"{job}.output")[0])
        wait_until(lambda: len(ballast_out()) >= len(expected), 240, "every window emitted by Ballast")
        assert runner.query.exception() is None
    finally:
        runner.stop()
    got_ballast = ballast_out()
    t_ballast = time.time() - t0

    # the original under Spark's own transformWithState
    import window_counts as wc
    from pyspark import cloudpickle

    # Spark's transformWithState driver-side runner does not see addPyFile: ship the class by value
    cloudpickle.register_pickle_by_value(wc)
    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    kdf = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
           .option("subscribe", topic).option("startingOffsets", "earliest").load())
    name = f"spark_{job.replace('-', '_')}"
    q = (wc.start_spark(kdf).writeStream.format("memory").queryName(name).outputMode("append")
         .option("checkpointLocation", str(tmp_path / "spark-native")).trigger(availableNow=True).start())
    q.awaitTermination(600)
    got_spark = sorted(as_tuple(r.asDict()) for r in spark.table(name).collect())
    print(f"windows={len(expected)} ballast {t_ballast:.0f}s")
    assert got_spark == expected, "Spark's own run differs from the reference"
    assert got_ballast == expected, "the Ballast run differs from Spark's and the reference"
