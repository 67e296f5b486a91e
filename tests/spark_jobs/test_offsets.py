"""Which offsets an epoch covered, from Spark's offset log (spark_jobs.offsets): epoch 0 starts
where the query started (`sources/0/0`, not a partition's earliest offset: with `startingOffsets`
latest, older control records are not the epoch's), later epochs where the one before ended."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_jobs.offsets import clear_interrupted_start, committed_epochs, epoch_ranges


def _log(root: Path, rel: str, offsets: dict, prefix: bytes = b"") -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(prefix + b"v1\n" + json.dumps({"batchWatermarkMs": 0}).encode() + b"\n"
                  + json.dumps(offsets).encode())


def test_epoch_zero_starts_where_the_query_started_and_later_epochs_where_the_last_ended(tmp_path: Path) -> None:
    _log(tmp_path, "offsets/0", {"in": {"0": 10}, "ctl": {"0": 7}})
    _log(tmp_path, "offsets/1", {"in": {"0": 15, "1": 4}, "ctl": {"0": 7}})
    # Kafka's source logs the offsets it started from apart, behind a zero byte (its own format)
    (tmp_path / "sources/0").mkdir(parents=True)
    (tmp_path / "sources/0/0").write_bytes(b"\x00v1\n" + json.dumps({"in": {"0": 8}, "ctl": {"0": 5}}).encode())
    earliest = {("in", 0): 0, ("in", 1): 1, ("ctl", 0): 0}
    assert epoch_ranges(tmp_path, 0, lambda t, p: earliest[(t, p)]) == {"in": {0: (8, 10)}, "ctl": {0: (5, 7)}}
    # a partition the query first sees in a later epoch starts at its earliest offset
    assert epoch_ranges(tmp_path, 1, lambda t, p: earliest[(t, p)]) == {"in": {0: (10, 15), 1: (1, 4)},
                                                                       "ctl": {0: (7, 7)}}
    assert epoch_ranges(tmp_path, 2) is None  # not logged yet: the log cannot tell


def test_without_the_start_file_epoch_zero_starts_at_the_earliest_offsets(tmp_path: Path) -> None:
    _log(tmp_path, "offsets/0", {"in": {"0": 10}})
    assert epoch_ranges(tmp_path, 0, lambda t, p: 3) == {"in": {0: (3, 10)}}


SPARK_TMP = ".0.0f3c2a4e-1b6d-4c8e-9a7f-5d2e8b1c6a90.tmp"  # how Spark names an offset file being written


def _interrupted_first_write(spark_ckpt: Path) -> None:
    """What a driver SIGKILLed while writing its first offset file leaves on a local filesystem."""
    (spark_ckpt / "offsets").mkdir(parents=True)
    (spark_ckpt / "offsets" / SPARK_TMP).write_text("v1\n{}")
    (spark_ckpt / "offsets" / f".{SPARK_TMP}.crc").write_bytes(b"crc")
    (spark_ckpt / "metadata").write_text('{"id":"5c3d8a4e-0000-4000-8000-000000000000"}')


def test_a_start_clears_what_an_interrupted_first_offset_write_left(tmp_path: Path) -> None:
    _interrupted_first_write(tmp_path)
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / ".0.crc").write_bytes(b"crc")  # an orphaned checksum
    removed = clear_interrupted_start(tmp_path)
    assert sorted(removed) == sorted([f"offsets/{SPARK_TMP}", f"offsets/.{SPARK_TMP}.crc", "commits/.0.crc"])
    assert not list((tmp_path / "offsets").iterdir()) and not list((tmp_path / "commits").iterdir())
    assert (tmp_path / "metadata").exists(), "the query's id stays: the restarted query is the same query"
    assert clear_interrupted_start(tmp_path) == [], "twice is once"


def test_once_a_batch_is_logged_or_for_files_not_spark_s_own_nothing_is_removed(tmp_path: Path) -> None:
    _interrupted_first_write(tmp_path)
    _log(tmp_path, "offsets/0", {"in": {"0": 10}})
    assert clear_interrupted_start(tmp_path) == []  # Spark ignores temporaries beside a logged batch
    assert (tmp_path / "offsets" / SPARK_TMP).exists()
    other = tmp_path / "fresh"
    (other / "offsets").mkdir(parents=True)
    for name in ("notes.txt", ".0.tmp", ".x.0f3c2a4e-1b6d-4c8e-9a7f-5d2e8b1c6a90.tmp"):
        (other / "offsets" / name).write_text("?")
    assert clear_interrupted_start(other) == [], "a file Spark did not write is Spark's to refuse"
    assert clear_interrupted_start(tmp_path / "missing") == []


@pytest.mark.dataplane
def test_spark_refuses_the_leftover_and_starts_once_it_is_cleared(spark, tmp_path: Path) -> None:
    """Why the start clears it: on the leftover alone Spark's new query fails; cleared, it runs."""
    ckpt = tmp_path / "spark"
    _interrupted_first_write(ckpt)
    (ckpt / "metadata").unlink()  # a query of its own id

    def run() -> Exception | None:
        q = (spark.readStream.format("rate").option("rowsPerSecond", 10).load().writeStream.format("noop")
             .option("checkpointLocation", str(ckpt)).trigger(processingTime="100 milliseconds").start())
        try:
            q.processAllAvailable()
            return None
        except Exception as exc:  # noqa: BLE001 - the query's own failure is what is compared
            return exc
        finally:
            q.stop()

    refused = run()
    assert refused is not None and "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY" in str(refused)
    assert clear_interrupted_start(ckpt)
    assert run() is None
    assert committed_epochs(ckpt), "a batch ran and committed"
