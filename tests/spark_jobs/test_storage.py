"""spark_jobs.storage: a Location keeps its URI's scheme, and durable objects appear whole or not at
all (a temporary name, then a rename), against real failures: a writer process killed by the
kernel mid-write, and a small tmpfs that fills up mid-write. The readers are the data plane's own:
the worker's check for a finished attempt (`find_object`) and the driver's commit."""

from __future__ import annotations

import errno
import logging
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_jobs.durable import DurableState, StateGap, find_object
from spark_jobs.objects import OUTPUT, ObjectReader, ObjectWriter, epoch_name, object_name
from spark_jobs.storage import (
    Location,
    StorageAccessDenied,
    StorageBucketMissing,
    StorageUnavailable,
)
from tests.helpers import disks

pytestmark = pytest.mark.dataplane
REPO = Path(__file__).resolve().parents[2]
EPOCH = 3

# Writes the object's bytes to its name the way a worker does (spark_jobs.worker._run), with the
# default action of SIGXFSZ restored (Python ignores it): past the file-size limit the kernel kills
# the process inside write(), and no Python code runs after it.
WRITER = """
import signal, sys
from spark_jobs.storage import Location
data = open(sys.argv[2], "rb").read()
signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
Location.of(sys.argv[1]).write_bytes(data)
"""


def _object(mib: int) -> tuple[bytes, dict[int, list[bytes]]]:
    """A changelog object of about `mib` MiB over 8 bins, and each bin's values."""
    w = ObjectWriter(meta={"epoch": EPOCH, "worker": 0, "kind": "changelog", "metrics": {"records_in": 1}})
    per_bin = {b: [bytes([b, i % 251]) * (8 << 10) for i in range(mib * 8)] for b in range(8)}  # 16 KiB each
    for b, values in per_bin.items():
        w.add_bin(b, [f"k{b}-{i}".encode() for i in range(len(values))], list(values))
    w.add_output(OUTPUT, b"key", b"value")
    return w.to_bytes(), per_bin


def _assert_whole(root: str, data: bytes, per_bin: dict[int, list[bytes]]) -> None:
    loc = find_object(root, "changelog", EPOCH, 0)
    assert loc is not None and loc.read_bytes() == data
    r = ObjectReader(loc)
    try:
        assert {b: r.bin_changes(b)[1] for b in r.bins} == per_bin
        assert r.outputs() == [(OUTPUT, b"key", b"value", None)]
    finally:
        r.close()
    assert DurableState(root, "j", 8).commit_epoch(EPOCH, 0, 1, False) == [{"records_in": 1}]


def _assert_nothing_published(root: str) -> None:
    assert (Location.of(root) / "changelog" / epoch_name(EPOCH)).list() == []
    assert find_object(root, "changelog", EPOCH, 0) is None  # a retry runs the epoch again
    with pytest.raises(StateGap, match="no changelog object from worker"):  # the driver picks nothing
        DurableState(root, "j", 8).commit_epoch(EPOCH, 0, 1, False)


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def test_a_writer_killed_mid_write_publishes_nothing_and_a_retry_writes_the_object_whole(tmp_path):
    root = str(tmp_path / "state")
    DurableState(root, "j", 8)  # the job's store exists before any task writes
    data, per_bin = _object(4)
    blob = tmp_path / "object.bin"
    blob.write_bytes(data)
    target = Location.of(root) / "changelog" / epoch_name(EPOCH) / object_name(0, "s1a0-killed")
    res = subprocess.run([sys.executable, "-B", "-c", WRITER, target.uri, str(blob)], cwd=REPO,
                         preexec_fn=_limit_file_size, capture_output=True, timeout=120)
    assert res.returncode == -signal.SIGXFSZ, res.stderr.decode()[-2000:]
    left = list((tmp_path / "state" / "changelog" / epoch_name(EPOCH)).iterdir())
    assert [p.name.split(".tmp-")[0] for p in left] == [target.name]  # killed with its temporary half written
    assert left[0].stat().st_size == 1 << 20 < len(data)
    _assert_nothing_published(root)

    (Location.of(root) / "changelog" / epoch_name(EPOCH) / object_name(0, "s1a1-retry")).write_bytes(data)
    _assert_whole(root, data, per_bin)


def test_a_file_system_full_mid_write_publishes_nothing_and_a_retry_writes_the_object_whole(tmp_path):
    with disks.small_tmpfs(tmp_path / "mnt", "8m") as mnt:
        root = str(mnt / "state")
        DurableState(root, "j", 8)
        other = mnt / "other"  # what else fills the disk
        other.write_bytes(b"\0" * (4 << 20))
        data, per_bin = _object(5)
        with pytest.raises(OSError) as err:
            (Location.of(root) / "changelog" / epoch_name(EPOCH) / object_name(0, "s1a0-full")).write_bytes(data)
        assert err.value.errno == errno.ENOSPC or "No space left" in str(err.value), err.value
        _assert_nothing_published(root)
        # the failed write gave its space back: once the disk is freed, the retry fits
        assert list((mnt / "state" / "changelog" / epoch_name(EPOCH)).iterdir()) == []
        other.unlink()
        (Location.of(root) / "changelog" / epoch_name(EPOCH) / object_name(0, "s1a1-retry")).write_bytes(data)
        _assert_whole(root, data, per_bin)


def test_location_keeps_the_scheme_and_writes_atomically(tmp_path):
    loc = Location.of(f"file://{tmp_path}") / "a" / "b.json"
    assert loc.uri == f"file://{tmp_path}/a/b.json" and loc.path == f"{tmp_path}/a/b.json"
    assert loc.read_json() is None and not loc.exists()
    loc.write_json({"x": 1})
    assert loc.read_json() == {"x": 1} and (tmp_path / "a" / "b.json").exists()
    (tmp_path / "a" / "c.json.tmp-123").write_text("half")  # an interrupted write is never listed
    assert Location.of(tmp_path / "a").list() == ["b.json"]
    with pytest.raises(ValueError, match="cannot open storage location"):
        Location.of("nosuchscheme://x/y")


# -- an object store: a real S3-compatible server (s3s-fs, tests/conftest.py `s3_server`) ---------

def test_on_an_object_store_the_data_plane_objects_round_trip_in_one_put_each(s3_server):
    """Durable objects written and read back the way the worker and the driver do, on s3://; a
    write is one PUT (no directory marker, no check of a parent: an object store has none)."""
    root = "s3://ballast/job-a/state"
    data, per_bin = _object(5)
    before = s3_server.request_counts()
    loc = Location.of(root) / "changelog" / epoch_name(EPOCH) / object_name(0, "s1a0")
    loc.write_bytes(data)
    wrote = s3_server.request_counts() - before
    assert sum(wrote.values()) == wrote["PutObject"] == 1, wrote
    assert find_object(root, "changelog", EPOCH, 0) == loc
    r = ObjectReader(loc)  # a ranged read per batch, through the outage-patient file
    try:
        assert {b: r.bin_changes(b)[1] for b in r.bins} == per_bin
        assert r.outputs() == [(OUTPUT, b"key", b"value", None)]
    finally:
        r.close()
    (Location.of(root) / "changelog" / epoch_name(EPOCH)).delete_dir()
    assert (Location.of(root) / "changelog" / epoch_name(EPOCH)).list() == []
    assert (Location.of(root) / "missing.json").read_json() is None


def test_an_object_store_outage_shorter_than_the_budget_costs_a_wait_not_an_error(s3_server, monkeypatch, caplog):
    """The server is stopped before a write and started again 4 s later: the write waits (warning
    each retry), then lands whole; reads after it see it."""
    monkeypatch.setenv("BALLAST_STORAGE_OUTAGE_S", "60")
    loc = Location.of("s3://ballast/job-b/state/store.json")
    loc.write_json({"n": 1})
    s3_server.kill()
    restart = threading.Timer(4.0, s3_server.up)
    restart.start()
    t0 = time.monotonic()
    try:
        with caplog.at_level(logging.WARNING, logger="spark_jobs.storage"):
            loc.write_json({"n": 2})
    finally:
        restart.join()
    assert time.monotonic() - t0 >= 3.0
    assert loc.read_json() == {"n": 2}
    assert any("object store unreachable" in r.getMessage() for r in caplog.records), caplog.text


def test_an_object_store_outage_longer_than_the_budget_fails_with_what_to_do(s3_server, monkeypatch):
    monkeypatch.setenv("BALLAST_STORAGE_OUTAGE_S", "3")
    loc = Location.of("s3://ballast/job-c/state/store.json")
    s3_server.down()
    t0 = time.monotonic()
    with pytest.raises(StorageUnavailable, match="BALLAST_STORAGE_OUTAGE_S") as err:
        loc.read_json()
    assert 3.0 <= time.monotonic() - t0 < 30, "the budget bounds the wait"
    assert "AWS_ENDPOINT_URL" in str(err.value)


def test_wrong_credentials_fail_at_once_without_waiting(s3_server, monkeypatch):
    monkeypatch.setenv("BALLAST_STORAGE_OUTAGE_S", "60")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    t0 = time.monotonic()
    with pytest.raises(OSError) as err:
        Location.of("s3://ballast/job-d/x.json").write_json({"n": 1})
    assert not isinstance(err.value, StorageUnavailable)
    assert time.monotonic() - t0 < 10, "a refusal no wait cures is reported at once"


def test_a_missing_bucket_or_refused_keys_fail_at_once_with_what_to_do(s3_server, monkeypatch):
    Location.of("s3://ballast/job-e/ckpt").check_access()  # the bucket exists and takes the keys
    with pytest.raises(StorageBucketMissing, match="bucket 'nope' does not exist.*create it"):
        Location.of("s3://nope/job-e/ckpt").check_access()
    monkeypatch.setenv("BALLAST_STORAGE_OUTAGE_S", "60")  # refused keys are no outage: no wait
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"):
        with monkeypatch.context() as m:
            m.setenv(var, "wrong")
            t0 = time.monotonic()
            with pytest.raises(StorageAccessDenied, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
                Location.of("s3://ballast/job-e/ckpt").check_access()
            with pytest.raises(StorageAccessDenied, match="s3-env"):
                Location.of("s3://ballast/job-e/ckpt/ballast/job.json").read_json()
            assert time.monotonic() - t0 < 20


def test_an_unreachable_endpoint_fails_after_the_budget_with_what_to_do(s3_server, monkeypatch):
    monkeypatch.setenv("BALLAST_STORAGE_OUTAGE_S", "2")
    s3_server.down()
    with pytest.raises(StorageUnavailable, match="AWS_ENDPOINT_URL.*up and reachable"):
        Location.of("s3://ballast/job-f/ckpt").check_access()
