"""A cache is only a cache: an epoch whose local cache fails runs on, on a fresh cache rebuilt from
the durable state, and says so in its metrics (the driver turns that into a `cache_degraded` event,
the console into a warning).

Why rebuild rather than stop (docs/dataplane.md, "A cache is only a cache"): every entry of the
cache can be rebuilt from the durable state (spark_jobs.durable), and the epoch's result does not
depend on what the cache held (spark_jobs.worker). So a full disk (ENOSPC), unreadable or corrupt
LMDB files, or the directory deleted under the job cost time (the owned bins are loaded again),
never the query. The places tried, in order:

1. the configured cache (`--cache-dir`, or the executor's own dir) as found;
2. the same place, emptied (`rm -rf` of the worker's cache: corrupt files are gone, and the space
   they held is free again);
3. a fallback cache under the system temp dir (`$TMPDIR`, another file system than a cache disk
   of its own), as found, then emptied.

Between attempts, a changelog object the failed attempt already wrote (the failure came at the
cache's commit) is the epoch's result: its outputs are re-emitted, nothing is recomputed. A worker
process that fell back stays on the fallback for RETRY_PRIMARY_S, then tries its cache again.
Only when every place fails does the task fail, with the errors of all of them.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

import lmdb

from spark_jobs.cache import CacheError, CacheOwnerError, WorkerCache, cache_path

T = TypeVar("T")
RETRY_PRIMARY_S = 30.0
log = logging.getLogger("ballast.cache")

#: per Python worker process: a worker's own cache -> (when it failed, the degraded note)
_failed: dict[str, tuple[float, dict[str, Any]]] = {}
#: caches this process opened: one found empty again lost its files under the running job
_used: set[str] = set()

#: `fn(cache, txn, note)`: the epoch's work in the cache's write transaction; `note` is None on a
#: healthy cache, else what the epoch's metrics report under "cache" (see `_note`)
EpochFn = Callable[[WorkerCache, Any, "dict[str, Any] | None"], T]


def fallback_root(job: str) -> str:
    """Where a worker's cache goes when its own place fails (the same path in every process of
    the host, so the processes that serve one worker share it)."""
    return os.path.join(tempfile.gettempdir(), "ballast-cache-fallback", job)


def run_cached(root: str, store_id: str, job: str, worker: int, epoch: int, fn: EpochFn[T],
               done: Callable[[], T | None]) -> T:
    """Run one epoch of `worker` in its local cache, falling back as the module docstring says.
    `done()` returns the epoch's result if some attempt already wrote its changelog object."""
    fallback = fallback_root(job)
    places = [root] + ([fallback] if os.path.abspath(fallback) != os.path.abspath(root) else [])
    note: dict[str, Any] | None = None
    own = str(cache_path(root, store_id, worker))  # per worker: a process serves several in turn
    recent = _failed.get(own)
    if recent is not None and time.monotonic() - recent[0] < RETRY_PRIMARY_S and len(places) > 1:
        places, note = places[1:], recent[1]
    errors: list[str] = []
    last: tuple[str, str] | None = None  # the cache that failed last, and how
    for place in places:
        path = cache_path(place, store_id, worker)
        for fresh in (False, True):
            if fresh:
                shutil.rmtree(path, ignore_errors=True)
            if last is not None:
                note = _note(epoch, last[0], last[1], "a fallback cache under " + place if place == fallback
                             else "a fresh cache in the same place")
            try:
                cache = WorkerCache(place, store_id, job, worker)
                if cache.created and str(path) in _used and note is None:
                    note = _note(epoch, str(path), "its files were gone (the directory was deleted)",
                                 "a fresh cache in the same place")
                _used.add(str(path))
                try:
                    result = cache.write(lambda txn, c=cache, n=note: fn(c, txn, n))  # type: ignore[misc]
                finally:
                    cache.close()
            except (CacheError, lmdb.Error) as exc:
                errors.append(f"{path}: {type(exc).__name__}: {exc}")
                cause = exc.__cause__ or exc  # the OS's or LMDB's own words, not our advice around them
                last = (str(path), f"{type(cause).__name__}: {cause}")
                if place == root:
                    away = _note(epoch, str(path), last[1], "a fallback cache under " + fallback)
                    _failed[own] = (time.monotonic(), away)
                log.warning("worker %d, epoch %d: local cache %s failed (%s); rebuilding from the durable state",
                            worker, epoch, path, exc)
                if (out := done()) is not None:  # the failure came after the changelog object
                    return out
                if isinstance(exc, CacheOwnerError):
                    break  # another store's files: never deleted, the next place is used
                continue
            if place == root:
                _failed.pop(own, None)  # the cache works (again)
            return result
    raise CacheError(f"worker {worker}, epoch {epoch}: no local cache could be used, the durable state is "
                     f"untouched. Tried: {'; '.join(errors)}. Free space or point --cache-dir (and $TMPDIR) "
                     "at a writable local disk")


def _note(epoch: int, failed: str, error: str, where: str) -> dict[str, Any]:
    """What an epoch on a rebuilt cache reports: since when, what failed, where it runs now. The
    message is the event's: equal for every epoch of one episode, so it is recorded once."""
    error = error[:400]
    return {"since_epoch": epoch, "failed": failed, "error": error, "where": where,
            "message": f"local cache {failed} failed ({error}); the worker runs on {where}, rebuilt from the "
                       "durable state (slower until the cache is warm again)"}
