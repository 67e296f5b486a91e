"""A two-operator job (spark_jobs.chain): `tag` re-keys every record by its category, `keycount`
counts per category from the hand-off topic. An 8-step batched plan migrates the SECOND
operator's bins while the first keeps running; the final count of every category equals the
pure-Python reference, the first operator's map never changes, and each operator has its own
rows in the metrics DB (DS2 sees both, with their selectivity)."""

from __future__ import annotations

import random
import sys
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from ballast.topics import create_missing_topics, handoff_topic
from migrations_db import models as m
from migrations_db.db import session_scope
from spark_jobs.chain import OperatorSpec, start_chain
from spark_jobs.output import read_deduplicated_output, read_output
from spark_jobs.runner import RunConfig, ensure_job_topics
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import check_migration_property, checkpoints, plan_maps, produce, steps_from_maps
from tests.helpers.kill_runs import StepSender, cli_env, final_run, killed_runs
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

    try:
        produce(kafka_bootstrap, topic, users[: n // 2], 2, cats[: n // 2])
        wait_until(lambda: (chain.runner("keycount").epochs_done or 0) > 2, 180, "the second operator runs")
        for i, s in enumerate(steps):  # one step after the other's checkpoint, while input flows
            send_control(kafka_bootstrap, job, [s.to_json()], operator="keycount")
            if i == 2:
                produce(kafka_bootstrap, topic, users[n // 2:], 2, cats[n // 2:])
            wait_until(lambda s=s: (s.plan_id, s.step) in checkpoints(db_url, job), 120, f"step {s.step} applied")
        wait_until(lambda: _final_counts(kafka_bootstrap, job) == dict(expected), 240,
                   "every category counted exactly once")
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


def test_chain_exactly_once_across_driver_kills(kafka_bootstrap, make_topics, unique_name, tmp_path, db_url):
    """The same chain run by the CLI, SIGKILLed after an epoch's outputs were written but before its
    manifest (twice), inside a worker before its cache commits, and at a random moment, while the
    plan moves the second operator's bins: a replayed `tag` epoch re-emits its hand-off records
    (998 copies in one run), and `keycount` takes each once (spark_jobs.inputs)."""
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    n = 6000
    cats = [b"cat-%02d" % (i * 13 % 40) for i in range(n)]
    produce(kafka_bootstrap, topic, [b"u%03d" % (i * 7 % 50) for i in range(n)], 2, cats)
    ensure_job_topics(kafka_bootstrap, job, 2)
    steps = steps_from_maps(job, "keycount", "plan-kill", BINS, plan_maps(BINS))
    ckpt_dir, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--input-topic", topic,
           "--operator", "tag=chain_ops:Tag", "--operator", "keycount", "--bins", str(BINS), "--workers", "2",
           "--checkpoint-dir", str(ckpt_dir), "--bootstrap", kafka_bootstrap, "--db-url", db_url,
           "--trigger-ms", "200", "--max-offsets-per-trigger", "500"]
    env = cli_env(faults_file, HERE)
    sender = StepSender(kafka_bootstrap, job, "keycount", steps, ckpt_dir / "keycount" / "spark", db_url)
    # before_manifest: outputs written, epoch not committed — a replay re-emits them (for `tag`: hand-off copies)
    killed_runs(cmd, env, logs, faults_file, sender, random.Random(41),
                faults=("before_manifest 2", "worker_before_commit 3", "before_manifest 5", None))
    final_run(cmd, env, logs / "final.log", lambda: (sender(), sender.all_applied)[1]
              and _final_counts(kafka_bootstrap, job) == dict(Counter(cats)))
    cps = checkpoints(db_url, job)
    assert sorted(cps) == [("plan-kill", s.step) for s in steps] and all(c.status == "applied" for c in cps.values())
    assert check_migration_property(db_url, job, "keycount") > 0
    handed, copies = read_output(kafka_bootstrap, handoff_topic(job, "tag"))  # same id, same value: checked
    assert len(handed) == n, "tag emitted one record per input, each id once after deduplication"
    print(f"hand-off copies dropped by keycount: {copies}")


def _final_counts(bootstrap: str, job: str) -> dict[bytes, int]:
    """Each category's last count in `<job>.output` (deduplicated, in epoch order)."""
    last: dict[bytes, int] = {}
    for o in sorted(read_deduplicated_output(bootstrap, f"{job}.output"), key=lambda o: o.epoch):
        last[o.key] = int(o.value)
    return last
