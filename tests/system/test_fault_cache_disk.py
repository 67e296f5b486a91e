"""The disk of a worker's local cache fills up (issue 14): a small tmpfs as `--cache-dir`, filled
while the job runs. The epoch that needs more cache space fails with a clear error (CacheError:
"local disk full ... free space or move --cache-dir"), the durable state stays exactly the state
after the last committed epoch, and once space is freed a restart from the checkpoint finishes
with state and outputs exactly once."""

from __future__ import annotations

import errno
import subprocess

import pytest

from spark_jobs.bins import uniform_assignment
from spark_jobs.offsets import committed_epochs, read_end_offsets
from spark_jobs.output import read_output
from spark_jobs.runner import RunConfig, start_job
from tests.helpers.dp_helpers import check_state, produce, read_topic, reference_by_epoch, zipf_keys
from tests.helpers.fault_helpers import alive_check
from tests.helpers.wait import wait_until

pytestmark = [pytest.mark.faults, pytest.mark.dataplane, pytest.mark.slow]

BINS = 16
TMPFS = "16m"


@pytest.fixture
def small_tmpfs(tmp_path):  # type: ignore[no-untyped-def]
    mnt = tmp_path / "cache"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS},mode=0755", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"`mount -t tmpfs` failed ({res.stderr.strip()}): this test needs root (or CAP_SYS_ADMIN)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt) -> int:  # type: ignore[no-untyped-def]
    """Write a filler file until the tmpfs is full; returns its size."""
    n = 0
    with open(mnt / "filler", "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                n += f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
    return n


def _consumed(cfg: RunConfig, n: int) -> bool:
    spark_ckpt = cfg.checkpoint_dir + "/spark"
    eps = committed_epochs(spark_ckpt)
    return bool(eps) and sum(read_end_offsets(spark_ckpt, eps[-1]).get(cfg.input_topic, {}).values()) == n


def test_full_cache_disk_is_a_clear_error_and_no_corrupt_state(spark, kafka_bootstrap, make_topics, unique_name,
                                                               tmp_path, db_url, small_tmpfs):
    job, topic = unique_name, f"{unique_name}.in"
    make_topics({topic: 2})
    first = zipf_keys(4_000, 500, seed=3)
    second = [b"new-key-%06d-%s" % (i, b"x" * 40) for i in range(20_000)]  # new keys: the cache must grow
    produce(kafka_bootstrap, topic, first, 2)
    cfg = RunConfig(job=job, input_topic=topic, checkpoint_dir=str(tmp_path / "ckpt"), bootstrap=kafka_bootstrap,
                    db_url=db_url, bins=BINS, workers=2, trigger_ms=200, max_offsets_per_trigger=4000,
                    cache_dir=str(small_tmpfs))
    runner = start_job(spark, cfg)
    try:
        wait_until(lambda: _consumed(cfg, len(first)), 240, "first input consumed", check=alive_check(runner))
        filled = _fill(small_tmpfs)
        produce(kafka_bootstrap, topic, second, 2)
        wait_until(lambda: runner.query.exception() is not None, 240, "the job to fail on the full cache disk")
        err = str(runner.query.exception())
    finally:
        runner.stop()
    print(f"tmpfs {TMPFS} filled with {filled} bytes; the job failed with: ...{err[err.find('CacheError'):][:300]}")
    assert "CacheError" in err and ("local disk full" in err or "cannot open the local state cache" in err), err[-3000:]
    assert "--cache-dir" in err

    # no corrupt state: the durable state is exactly the state after the last committed epoch
    ckpt = cfg.checkpoint_dir + "/spark"
    done = committed_epochs(ckpt)
    ref, _ = reference_by_epoch(kafka_bootstrap, topic, ckpt, done)
    check_state(cfg.state_location, 2, uniform_assignment(BINS, 2), BINS, ref)

    # space back: a restart from the checkpoint replays the failed epoch and finishes exactly once
    (small_tmpfs / "filler").unlink()
    runner = start_job(spark, cfg)
    try:
        wait_until(lambda: _consumed(cfg, len(first) + len(second)), 300, "all input consumed after the restart",
                   check=alive_check(runner))
    finally:
        runner.stop()
    epochs = committed_epochs(ckpt)
    ref, ref_outputs = reference_by_epoch(kafka_bootstrap, topic, ckpt, epochs)
    assert sum(ref.values()) == len(first) + len(second) == len(read_topic(kafka_bootstrap, topic))
    check_state(cfg.state_location, 2, uniform_assignment(BINS, 2), BINS, ref)
    outs, dups = read_output(kafka_bootstrap, f"{job}.output")
    got = {(o.epoch, o.key, int(o.value)) for o in outs}
    assert got == ref_outputs, f"{len(got - ref_outputs)} unexpected, {len(ref_outputs - got)} missing outputs"
