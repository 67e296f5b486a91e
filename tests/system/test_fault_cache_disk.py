"""A cache is only a cache (issue 21): a running key-count job whose workers' local cache (a small
tmpfs as `--cache-dir`) gets its LMDB files overwritten, its directory deleted under running
tasks, and its disk filled, runs on — never a stopped query — on caches rebuilt from the durable
state (spark_jobs.cache_fallback); the metrics DB records `cache_degraded` events, the console
shows the job degraded, and state and outputs are exactly once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ballast import console, store
from ballast.store.event_log import CACHE_DEGRADED
from spark_jobs.bins import uniform_assignment
from spark_jobs.cache_fallback import fallback_root
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers import disks
from tests.helpers.dp_helpers import check_state, produce, read_topic, reference_by_epoch, zipf_keys
from tests.helpers.fault_helpers import alive_check
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.dataplane, pytest.mark.slow]

BINS = 16
TMPFS = "16m"


@pytest.fixture
def small_tmpfs(tmp_path):  # type: ignore[no-untyped-def]
    with disks.small_tmpfs(tmp_path / "cache", TMPFS) as mnt:
        yield mnt


def _consumed(cfg: RunConfig, n: int) -> bool:
    spark_ckpt = cfg.checkpoint_dir + "/spark"
    eps = committed_epochs(spark_ckpt)
    return bool(eps) and sum(read_end_offsets(spark_ckpt, eps[-1]).get(cfg.input_topic, {}).values()) == n


def _corrupt(mnt: Path) -> int:
    """Overwrite the head of every LMDB file of the cache (meta pages, reader table); returns how many."""
    files = sorted(mnt.glob("store-*/worker-*/*.mdb"))
    for p in files:
        with open(p, "r+b") as f:
            f.write(b"\xde\xad\xbe\xef" * 2048)
    return len(files)


def test_lost_corrupt_and_full_cache_are_rebuilt_while_the_job_runs_on(spark, kafka_bootstrap, make_topics,
                                                                       unique_name, tmp_path, db_url, small_tmpfs):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    batches = [zipf_keys(4_000, 500, seed=3), zipf_keys(2_000, 500, seed=4), zipf_keys(2_000, 700, seed=5),
               [b"new-key-%06d-%s" % (i, b"x" * 40) for i in range(20_000)]]  # new keys: the cache must grow
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=200, max_offsets_per_trigger=4000,
                    cache_dir=str(small_tmpfs))
    runner = start_job(spark, cfg)
    sent = 0
    try:
        def feed(i: int) -> None:
            nonlocal sent
            produce(kafka_bootstrap, topic, batches[i], 2)
            sent += len(batches[i])

        feed(0)
        wait_until(lambda: _consumed(cfg, sent), 240, "first input consumed", check=alive_check(runner))
        assert _corrupt(small_tmpfs) >= 4  # idle job: no task has the files open
        feed(1)
        wait_until(lambda: _consumed(cfg, sent), 240, "input consumed after the cache files were overwritten",
                   check=alive_check(runner))
        feed(2)
        for _ in range(5):  # under running tasks
            shutil.rmtree(small_tmpfs / f"store-{runner.durable.store_id}", ignore_errors=True)  # type: ignore[union-attr]
        wait_until(lambda: _consumed(cfg, sent), 240, "input consumed after the cache directory was deleted",
                   check=alive_check(runner))
        filled = disks.fill(small_tmpfs)
        feed(3)
        wait_until(lambda: _consumed(cfg, sent), 300, "input consumed on a full cache disk",
                   check=alive_check(runner))
        assert runner.query.exception() is None
    finally:
        runner.stop()
        shutil.rmtree(fallback_root(job), ignore_errors=True)  # the workers' $TMPDIR is this process's

    events = store.events(db_url, job, kind=CACHE_DEGRADED, limit=100)
    print(f"tmpfs {TMPFS} filled with {filled} bytes; {len(events)} cache_degraded event(s):")
    for e in events:
        print(f"  epoch {e.epoch}: {e.message[:300]}")
    assert any("MDB_INVALID" in e.message and "a fresh cache in the same place" in e.message for e in events)
    assert any("a fallback cache under" in e.message and "No space left on device" in e.message for e in events)
    for e in events:  # each event names the worker's own cache
        assert e.message.split(":")[0] == f"worker {e.details['worker']}", e.message
        assert e.details["failed"].endswith(f"worker-{e.details['worker']:04d}"), e.details
    row = next(r for r in console.jobs(db_url) if r["job"] == job)
    assert row["degraded"] and any("degraded" in a["text"] for a in row["attention"]), row["attention"]

    # exactly once: the durable state and the outputs are those of a job that never lost its cache
    ckpt = cfg.checkpoint_dir + "/spark"
    epochs = committed_epochs(ckpt)
    ref, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, ckpt, epochs)
    assert sum(ref.values()) == sent == len(read_topic(kafka_bootstrap, topic))
    check_state(cfg.state_location, 2, uniform_assignment(BINS, 2), BINS, ref)
    outs, dups = read_output(kafka_bootstrap, f"{job}.output")
    got = {(o.epoch, o.key, int(o.value)) for o in outs}
    assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
