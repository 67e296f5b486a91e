"""A two-operator job (spark_jobs.chain): `tag` re-keys every record by its category, `keycount`
counts per category from the hand-off topic. An 8-step batched plan migrates the SECOND
operator's bins while the first keeps running; the final count of every category equals the
pure-Python reference, the first operator's map never changes, and each operator has its own
rows in the metrics DB (DS2 sees both, with their selectivity)."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from ballast.topics import create_missing_topics, handoff_topic
from dp_helpers import check_migration_property, checkpoints, plan_maps, produce, steps_from_maps
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.chain import OperatorSpec, start_chain
from spark_jobs.output import read_deduplicated_output
from spark_jobs.runner import RunConfig
from tests.helpers.control import send_control
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

HERE = Path(__file__).resolve().parent
BINS = 16


def test_chain_migrates_the_second_operator_while_the_first_runs(spark, kafka_bootstrap, unique_name, tmp_path,
                                                                 db_url):
    job, topic = unique_name, f"{unique_name}.in"
    create_missing_topics(kafka_bootstrap, {topic: 2})
    n = 6000
    users = [b"u%03d" % (i * 7 % 50) for i in range(n)]
    cats = [b"cat-%02d" % (i * 13 % 40) for i in range(n)]
    expected = Counter(cats)
    spark.sparkContext.addPyFile(str(HERE / "chain_ops.py"))
    sys.path.insert(0, str(HERE))
    base = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                     db_url=db_url, bins=BINS, workers=2, trigger_ms=300, max_offsets_per_trigger=400)
    chain = start_chain(spark, base, [OperatorSpec.parse("tag=chain_ops:Tag"), OperatorSpec.parse("keycount")])
    steps = steps_from_maps(job, "keycount", "plan-2nd", BINS, plan_maps(BINS))

    def final_counts() -> dict[bytes, int]:
        last: dict[bytes, int] = {}
        for o in sorted(read_deduplicated_output(kafka_bootstrap, f"{job}.output"), key=lambda o: o.epoch):
            last[o.key] = int(o.value)
        return last

    try:
        produce(kafka_bootstrap, topic, users[: n // 2], 2, cats[: n // 2])
        wait_until(lambda: (chain.runner("keycount").epochs_done or 0) > 2, 180, "the second operator runs")
        for i, s in enumerate(steps):  # one step after the other's checkpoint, while input flows
            send_control(kafka_bootstrap, job, [s.to_json()], operator="keycount")
            if i == 2:
                produce(kafka_bootstrap, topic, users[n // 2:], 2, cats[n // 2:])
            wait_until(lambda s=s: (s.plan_id, s.step) in checkpoints(db_url, job), 120, f"step {s.step} applied")
        wait_until(lambda: final_counts() == dict(expected), 240, "every category counted exactly once")
        assert all(r.query.exception() is None for r in chain.runners)
    finally:
        chain.stop()
    cps = checkpoints(db_url, job)
    assert sorted(cps) == [("plan-2nd", s.step) for s in steps] and all(c.status == "applied" for c in cps.values())
    with session_scope(db_url) as s:
        maps = {(r.operator, r.map_version) for r in s.scalars(select(m.RoutingMap).where(m.RoutingMap.job == job))}
        per_op = {r.operator for r in s.scalars(select(m.WorkerMetrics).where(m.WorkerMetrics.job == job))}
        rows = list(s.scalars(select(m.WorkerMetrics).where(m.WorkerMetrics.job == job)))
    assert {v for op, v in maps if op == "tag"} == {0}, "the first operator's map never changed"
    assert {v for op, v in maps if op == "keycount"} == set(range(len(steps) + 1))
    assert per_op == {"tag", "keycount"}
    tag_in = sum(r.records_in for r in rows if r.operator == "tag")
    tag_out = sum(r.records_out for r in rows if r.operator == "tag")
    assert tag_in == n and tag_out == n, "the first operator's selectivity is 1 here"
    assert check_migration_property(db_url, job, "keycount") > 0 and check_migration_property(db_url, job, "tag") > 0
    assert handoff_topic(job, "tag") == f"{job}.tag.out"
