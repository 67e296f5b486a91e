"""WordCount end to end: the key extractor explodes sentences; counts survive a live move."""

from __future__ import annotations

import random
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ballast.protocol import ControlStep, Move
from spark_jobs.bins import bin_of_store_key, decode_entry, uniform_assignment
from spark_jobs.durable import read_state
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.operators import decode_count
from spark_jobs.output import read_deduplicated_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.control import send_control
from tests.helpers.dp_helpers import checkpoints
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]
VOCAB = ["alpha", "Beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "lambda", "mu",
         "don't", "x1", "ÄRGER"]


def test_wordcount_counts_words_across_a_move(spark, kafka_bootstrap, make_topics, unique_name, tmp_path, db_url,
                                              produce_with_spark):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    rng = random.Random(4)
    sentences = [" ".join(rng.choice(VOCAB) for _ in range(rng.randint(1, 12))) + rng.choice([".", "!", ""])
                 for _ in range(6000)]
    ref = Counter(w for s in sentences for w in re.split(r"[^\w']+", s.lower()) if w)
    produce_with_spark(topic, [b"s%d" % i for i in range(len(sentences))], [s.encode() for s in sentences])
    cfg = RunConfig(job=job, operator="wordcount", input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"),
                    bootstrap=kafka_bootstrap, db_url=db_url, bins=8, workers=2, trigger_ms=100,
                    max_offsets_per_trigger=1500)
    ckpt = cfg.checkpoint_dir + "/spark"
    # as if an earlier driver had died writing its first offset file: Spark alone would refuse to start
    leftover = Path(ckpt) / "offsets" / ".0.0f3c2a4e-1b6d-4c8e-9a7f-5d2e8b1c6a90.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("v1\n{}")
    runner = start_job(spark, cfg)
    assert not leftover.exists()
    try:
        wait_until(lambda: len(committed_epochs(ckpt)) >= 1, 240, "first epoch")
        now = datetime.now(UTC)
        step = ControlStep(job=job, operator="wordcount", plan_id="wc", step=1, steps=1, kind="moves",
                           moves=(Move(0, 0, 1), Move(7, 1, 0)), workers=2, map_version=0, issued_at=now,
                           effective_at=now)
        send_control(kafka_bootstrap, job, [step.to_json()], operator="wordcount")
        wait_until(lambda: ("wc", 1) in checkpoints(db_url, job), 240, "checkpoint")
        wait_until(lambda: (e := committed_epochs(ckpt)) and sum(read_end_offsets(ckpt, e[-1]).get(topic, {}).values())
                   == len(sentences), 180, "all input consumed")
        # the stop file (what `python -m spark_jobs.cli stop` touches) ends the query after an epoch
        (Path(cfg.checkpoint_dir) / "ballast" / "STOP").touch()
        wait_until(lambda: not runner.query.isActive, 60, "stop via the stop file")
        assert runner.query.exception() is None
    finally:
        runner.stop()
    assert checkpoints(db_url, job)[("wc", 1)].status == "applied"
    final = uniform_assignment(8, 2)
    final[0], final[7] = 1, 0
    got = {}
    for b, kv in read_state(cfg.state_location).items():
        for sk, v in kv.items():
            assert bin_of_store_key(sk, 3) == b
            key, st = decode_entry(sk, v)
            got[key.decode()] = decode_count(st)
    assert got == dict(ref)
    latest = {}
    for o in read_deduplicated_output(kafka_bootstrap, f"{job}.output"):
        latest[o.key.decode()] = max(latest.get(o.key.decode(), 0), int(o.value))
    assert latest == dict(ref)
