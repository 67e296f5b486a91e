"""Event-time timers fire exactly once across a batched migration and SIGKILLs of the driver: the
tumbling-window processor (examples/operators/window_counts.py) run by the CLI, killed inside a
worker before its cache commits (timers of that epoch had fired) and at a random time while an
8-step plan moves bins; after restarts, the deduplicated outputs equal the pure-Python reference
with every (user, window) exactly once, and no state of an emitted window is left."""

from __future__ import annotations

import json
import random
import sys

import pytest

from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import ensure_job_topics
from tests.helpers.dp_helpers import plan_maps, produce, steps_from_maps
from tests.helpers.kill_runs import StepSender, check_plan_applied, cli_env, final_run, keys_with_state, killed_runs
from tests.helpers.window_helpers import EXAMPLES, FLUSH_USER, as_tuple, flush_record, produce_events

pytestmark = [pytest.mark.dataplane, pytest.mark.slow]

BINS = 32
OP = "window_counts:WindowCounts"


def test_window_timers_fire_exactly_once_across_migration_and_kills(kafka_bootstrap, make_topics, unique_name,
                                                                    tmp_path, db_url):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 4})
    evs, expected = produce_events(kafka_bootstrap, topic, 4, 8000, users=40, seed=11)
    ensure_job_topics(kafka_bootstrap, job, 2)
    maps = plan_maps(BINS)
    steps = steps_from_maps(job, OP, "plan-win", BINS, maps)
    ckpt_dir, faults_file, logs = tmp_path / "ckpt", tmp_path / "faults", tmp_path / "logs"
    logs.mkdir()
    cmd = [sys.executable, "-m", "spark_jobs.cli", "run", "--job", job, "--operator", OP, "--input-topic", topic,
           "--bins", str(BINS), "--workers", "2", "--checkpoint-dir", str(ckpt_dir), "--bootstrap", kafka_bootstrap,
           "--db-url", db_url, "--trigger-ms", "100", "--max-offsets-per-trigger", "800"]
    env = cli_env(faults_file, EXAMPLES)
    spark_ckpt = ckpt_dir / "spark"
    rng = random.Random(29)
    control_tick = StepSender(kafka_bootstrap, job, OP, steps, spark_ckpt, db_url)
    flushed = False

    def consumed() -> int:
        eps = committed_epochs(spark_ckpt)
        end = read_end_offsets(spark_ckpt, eps[-1]) if eps else None
        return sum((end or {}).get(topic, {}).values())

    def outputs() -> list[tuple[str, int, int, int]]:
        return sorted(as_tuple(json.loads(o.value)) for o in read_output(kafka_bootstrap, f"{job}.output")[0])

    killed_runs(cmd, env, logs, faults_file, control_tick, rng)

    def done() -> bool:
        nonlocal flushed
        control_tick()
        if not flushed and consumed() == len(evs):
            fk, fv = flush_record(evs)  # after the rest, so that it makes nothing late
            produce(kafka_bootstrap, topic, fk, 1, fv)
            flushed = True
        return flushed and control_tick.all_applied and len(outputs()) >= len(expected)

    final_run(cmd, env, logs / "final.log", done)

    check_plan_applied(db_url, job, "plan-win", steps)
    got = outputs()
    assert len(set(got)) == len(got), "a (user, window) emitted twice: a timer fired more than once"
    assert got == expected, f"{len(set(got) - set(expected))} unexpected, {len(set(expected) - set(got))} missing"
    # all that is left in the durable state: the flush event's open window and its timer
    assert keys_with_state(str(ckpt_dir / "state"), "user") == {FLUSH_USER}
    print(f"windows={len(got)} epochs={len(committed_epochs(spark_ckpt))}")
