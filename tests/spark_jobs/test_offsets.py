"""Which offsets an epoch covered, from Spark's offset log (spark_jobs.offsets): epoch 0 starts
where the query started (`sources/0/0`, not a partition's earliest offset: with `startingOffsets`
latest, older control records are not the epoch's), later epochs where the one before ended."""

from __future__ import annotations

import json
from pathlib import Path

from spark_jobs.offsets import epoch_ranges


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
