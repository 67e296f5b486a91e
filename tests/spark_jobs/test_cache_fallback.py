"""A cache is only a cache (spark_jobs.cache_fallback), without Spark: a worker's epoch whose local
cache has corrupt files, lost its directory, or sits on a full disk runs on, on a cache rebuilt
from the durable state; the durable state and the outputs are exactly what a healthy cache gives,
and the epoch's metrics say the cache was degraded. Faults for real: bytes overwritten in the LMDB
files, `rm -rf` of the directory, a full tmpfs."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from spark_jobs import cache_fallback
from spark_jobs.cache import CacheError, cache_path
from spark_jobs.cache_fallback import run_cached
from spark_jobs.worker import ApplyConfig, _done_outputs, _run
from tests.helpers import disks
from tests.helpers.worker_epochs import Harness, keys_of

pytestmark = pytest.mark.dataplane


class CachedHarness(Harness):
    """The harness with the worker's real cache path: `run_cached` on one cache root."""

    def __init__(self, root: Path, cache_root: Path) -> None:
        super().__init__(root, workers=2, snapshot_every=3)
        self.cache_root = cache_root

    def task(self, cfg: ApplyConfig, worker: int, keys: list[bytes], executor: str,
             values: list[bytes] | None = None) -> list:
        t = self.table(keys, worker, values)
        n = t.num_rows if t is not None else 0
        return run_cached(str(self.cache_root), cfg.store_id, "j", worker, cfg.epoch,
                          lambda c, txn, note: _run(cfg, c, txn, worker, t, n, "att", 0.0, 0.0, note),
                          lambda: _done_outputs(cfg, worker))

    def check(self, outs: list[Any]) -> None:
        """Durable state = the reference; the epoch's outputs = each key's count after it."""
        assert self.durable_counts() == dict(self.ref)
        got = {k: int(v) for _, k, v, _ in outs}
        assert got == {k: self.ref[k] for k in got} and got


@pytest.fixture(autouse=True)
def _own_tmpdir(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """The fallback goes under this test's own temp dir; no process-wide memory leaks between tests."""
    (tmp_path / "tmpdir").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmpdir"))
    monkeypatch.setattr(cache_fallback, "_failed", {})
    monkeypatch.setattr(cache_fallback, "_used", set())


def _notes(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["cache"] for d in docs if d.get("cache")]


def test_corrupt_cache_files_are_rebuilt_in_place(tmp_path):
    hz = CachedHarness(tmp_path, tmp_path / "cache")
    for e in range(4):
        outs, docs = hz.run_epoch(keys_of(200, e))
        assert not _notes(docs)
    for w in range(2):  # overwrite the LMDB header pages (both meta pages) and the lock file
        for name in ("data.mdb", "lock.mdb"):
            with open(cache_path(hz.cache_root, hz.ds.store_id, w) / name, "r+b") as f:
                f.write(b"\xde\xad\xbe\xef" * 4096)
    outs, docs = hz.run_epoch(keys_of(200, 9))
    hz.check(outs)
    notes = _notes(docs)
    assert len(notes) == 2 and all("a fresh cache in the same place" in n["message"] for n in notes), notes
    assert all("MDB_INVALID" in n["error"] for n in notes), notes
    outs, docs = hz.run_epoch(keys_of(200, 10))  # healthy again: nothing to report
    hz.check(outs)
    assert not _notes(docs)


def test_a_cache_directory_deleted_under_the_job_is_rebuilt(tmp_path):
    hz = CachedHarness(tmp_path, tmp_path / "cache")
    for e in range(3):
        hz.run_epoch(keys_of(200, e))
    shutil.rmtree(tmp_path / "cache")
    outs, docs = hz.run_epoch(keys_of(200, 7))
    hz.check(outs)
    notes = _notes(docs)
    assert len(notes) == 2 and all("directory was deleted" in n["message"] for n in notes), notes


@pytest.fixture
def small_tmpfs(tmp_path):  # type: ignore[no-untyped-def]
    with disks.small_tmpfs(tmp_path / "tmpfs", "8m") as mnt:
        yield mnt


def test_a_full_cache_disk_falls_back_and_the_job_runs_on(tmp_path, small_tmpfs):
    hz = CachedHarness(tmp_path, small_tmpfs)
    hz.run_epoch(keys_of(200, 0))
    disks.fill(small_tmpfs)
    for e in range(1, 5):  # new keys every epoch: the cache must grow, the tmpfs cannot
        outs, docs = hz.run_epoch([b"new-%d-%05d-%s" % (e, i, b"x" * 200) for i in range(400)] + keys_of(200, e))
        hz.check(outs)
        notes = _notes(docs)
        if e > 1:  # the epoch that hit ENOSPC at its commit re-emits its durable object; from then on the fallback
            assert len(notes) == 2 and all("a fallback cache under" in n["message"] for n in notes), notes
            assert all(n["since_epoch"] == 1 for n in notes), notes  # one episode: one event
    assert (tmp_path / "tmpdir" / "ballast-cache-fallback" / "j").is_dir()


def test_when_no_place_works_the_error_names_them_and_says_what_to_do(tmp_path, small_tmpfs, monkeypatch):
    hz = CachedHarness(tmp_path, small_tmpfs)
    (tmp_path / "not-a-dir").write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "not-a-dir"))
    disks.fill(small_tmpfs)
    with pytest.raises(CacheError) as err:
        hz.run_epoch(keys_of(50, 0))
    msg = str(err.value)
    assert str(small_tmpfs) in msg and "not-a-dir" in msg and "--cache-dir" in msg and "durable state" in msg, msg
    assert hz.ds.last_epoch == -1  # nothing committed
