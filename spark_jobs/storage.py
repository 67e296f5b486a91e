"""Files under a URI: the one way the job reads and writes its checkpoint dir and durable state.

Why: on a cluster the checkpoint dir and the state live where Spark checkpoints already live —
`hdfs://`, `s3://`, `gs://`, `abfs://` — and `Path("hdfs://nn:8020/ckpt") / "spark"` silently
becomes the local path `hdfs:/nn:8020/ckpt/spark`. `pyarrow.fs` (already a dependency, used by
Spark's own Python side) reaches all of them plus local paths, so every path in the data plane is
a `Location` (a filesystem and a path inside it), never a `pathlib.Path`.

Atomic writes: an object store makes an object visible only when its upload completes, so a
plain write is atomic there; on file systems (local, HDFS) we write a temporary name and rename
it, which is atomic on both. Readers never see half a file. A write that fails deletes its
temporary (a full disk would otherwise keep the space and fail the retry); one killed leaves it,
unlisted (`list` skips `.tmp-` names).

Object stores (s3://, gs://, abfs://): no directories, so a write makes no parent first (one PUT,
not a marker object and a check per write), a directory is removed object by object, and every
call waits through an unreachable server for up to `BALLAST_STORAGE_OUTAGE_S` (backing off, one
warning per attempt), like the job's Kafka and DB calls: a server restart mid-plan costs a pause,
not a failed epoch. Errors that no wait cures (access denied, no such bucket) fail at once. The
server and credentials come from the standard variables of the store's SDK (for S3:
`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`; docs/operations.md).

Spark's own checkpoint goes through Hadoop's filesystems, which name S3 `s3a://`: spark_jobs.s3a
maps the URIs and makes Spark's S3A settings (`Location.hadoop_uri` is the URI to give Spark).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow.fs as pafs

from ballast.errors import BallastError
from ballast.options import settings
from spark_jobs.s3a import hadoop_uri

log = logging.getLogger(__name__)
T = TypeVar("T")

_DIRECTORIES = ("local", "hdfs", "mock")  # filesystems with real directories (the others: object stores)
#: what an object store's client says when the server is away or overloaded (pyarrow's AWS/GCS errors)
_TRANSIENT = re.compile(
    r"NETWORK_CONNECTION|curlCode: (6|7|28|52|55|56)|Couldn't connect|Connection refused|timed out|Timeout"
    r"|SERVICE_UNAVAILABLE|SLOW_DOWN|INTERNAL_FAILURE|REQUEST_TIMEOUT|status code 5\d\d|HTTP response code 5\d\d",
    re.IGNORECASE)


def object_store_uri(uri: str) -> bool:
    """Whether `uri` names an object store, read from its scheme alone (opening one may ask the
    network, e.g. for an S3 bucket's region)."""
    return uri.split("://", 1)[0].lower() in ("s3", "gs", "gcs", "abfs", "abfss") if "://" in uri else False


class StorageUnavailable(BallastError, OSError):
    """An object store stayed unreachable for the whole outage budget."""


class StorageAccessDenied(BallastError, PermissionError):
    """The object store refused this host's credentials (wrong or missing keys, no permission)."""


class StorageBucketMissing(BallastError, OSError):
    """The bucket a location names does not exist on the object store."""


#: what an object store says when the credentials are wrong or lack a permission (pyarrow's AWS errors)
_DENIED = re.compile(r"ACCESS_DENIED|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|INVALID_ACCESS_KEY_ID"
                     r"|SIGNATURE_DOES_NOT_MATCH|status code 403|HTTP response code 403", re.IGNORECASE)
_NO_BUCKET = re.compile(r"NoSuchBucket|NO_SUCH_BUCKET", re.IGNORECASE)
def _denied(uri: str, detail: str) -> StorageAccessDenied:
    return StorageAccessDenied(
        f"{uri}: the object store refused the credentials ({detail}). Set AWS_ACCESS_KEY_ID and "
        f"AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary keys) to a key pair the server at "
        f"{os.environ.get('AWS_ENDPOINT_URL') or 'AWS'} accepts and that may read and write the bucket; the local "
        f"server's are printed by `python scripts/stack.py s3-env` (docs/operations.md, 'State on an object store').")


def _no_bucket(uri: str, bucket: str) -> StorageBucketMissing:
    return StorageBucketMissing(
        f"{uri}: bucket {bucket!r} does not exist on {os.environ.get('AWS_ENDPOINT_URL') or 'AWS'}: create it "
        f"first (Ballast makes no buckets) or fix the URI; the local stack's server has bucket 'ballast'.")


@dataclass(frozen=True)
class Location:
    """A directory (or file) on some filesystem; `/` joins like pathlib, but keeps the scheme."""

    fs: Any  # pyarrow.fs.FileSystem
    path: str
    uri: str  # as the user wrote it, plus the joined suffix (for logs and error messages)

    @classmethod
    def of(cls, uri: str | os.PathLike[str]) -> Location:
        """`uri` is a local path or any URI `pyarrow.fs.FileSystem.from_uri` understands."""
        uri = os.fspath(uri)
        if "://" not in uri:
            uri = os.path.abspath(uri)
        try:
            fs, path = pafs.FileSystem.from_uri(uri)
        except Exception as exc:  # pyarrow says which scheme it lacks; keep its words
            raise ValueError(f"cannot open storage location {uri!r}: {exc}") from exc
        if fs.type_name == "s3":
            fs = _one_put_per_write(fs)
        return cls(fs, path.rstrip("/") or "/", uri.rstrip("/"))

    def __truediv__(self, name: str) -> Location:
        return Location(self.fs, f"{self.path}/{name}", f"{self.uri}/{name}")

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def is_local(self) -> bool:
        return self.fs.type_name == "local"

    def __str__(self) -> str:
        return self.uri

    @property
    def hadoop_uri(self) -> str:
        """The URI to give Spark (its checkpoint goes through Hadoop's filesystems): `s3a://` for
        `s3://`, anything else as written."""
        return hadoop_uri(self.uri)

    def check_access(self) -> None:
        """On an object store: the bucket exists and takes this host's keys, else an error that
        says what to do (an unreachable server: StorageUnavailable after the outage budget).
        Elsewhere nothing."""
        if not self.is_object_store:
            return
        bucket = self.path.lstrip("/").split("/", 1)[0]
        if self._call("stat", self.fs.get_file_info, bucket).type == pafs.FileType.NotFound:
            raise _no_bucket(self.uri, bucket)
        self._call("stat", self.fs.get_file_info, self.path)  # a HEAD needs the keys, a HeadBucket may not

    @property
    def is_object_store(self) -> bool:
        """No directories, and a server that can be away (s3://, gs://, abfs://)."""
        return self.fs.type_name not in _DIRECTORIES

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`; on an object store, retried through an unreachable server for up to
        `storage_outage_s` from the first failure (then StorageUnavailable, which says what to do)."""
        if not self.is_object_store:
            return fn(*args)
        deadline: float | None = None
        delay = 0.5
        while True:
            try:
                return fn(*args)
            except FileNotFoundError:
                raise
            except OSError as exc:
                if not _TRANSIENT.search(str(exc)):
                    if _DENIED.search(str(exc)):
                        raise _denied(self.uri, str(exc).splitlines()[0][:300]) from exc
                    if _NO_BUCKET.search(str(exc)):
                        raise _no_bucket(self.uri, self.path.lstrip("/").split("/", 1)[0]) from exc
                    raise
                now = time.monotonic()
                budget = settings().storage_outage_s
                if deadline is None:
                    deadline = now + budget
                if now >= deadline:
                    raise StorageUnavailable(
                        f"{what} {self.uri}: the object store did not answer for {budget:.0f} s "
                        f"(BALLAST_STORAGE_OUTAGE_S); check that the server at AWS_ENDPOINT_URL (or the "
                        f"store's own endpoint) is up and reachable from this host. Last error: {exc}") from exc
                log.warning("%s %s: object store unreachable (%s); retrying for up to %.0f s more", what, self.uri,
                            str(exc).splitlines()[0][:200], deadline - now)
                time.sleep(min(delay, max(deadline - now, 0.0)))
                delay = min(delay * 2, 5.0)

    # -- reading ------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self._call("stat", self.fs.get_file_info, self.path).type != pafs.FileType.NotFound

    def read_bytes(self) -> bytes | None:
        """The whole file, or None when it does not exist."""
        return self._call("read", self._read_bytes)

    def _read_bytes(self) -> bytes | None:
        try:
            with self.fs.open_input_stream(self.path) as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            if _TRANSIENT.search(str(exc)):
                raise
            if self.fs.get_file_info(self.path).type == pafs.FileType.NotFound:
                return None
            raise exc

    def read_json(self) -> Any:
        raw = self.read_bytes()
        return None if raw is None else json.loads(raw)

    def read_text(self) -> str | None:
        raw = self.read_bytes()
        return None if raw is None else raw.decode()

    def open_random(self) -> Any:
        """A random-access file (for Arrow IPC footers and single record batches); on an object
        store each ranged read waits through an outage like every other call."""
        f = self._call("open", self.fs.open_input_file, self.path)
        return _PatientFile(self, f) if self.is_object_store else f

    def list(self) -> list[str]:
        """Names directly inside this directory (empty when it does not exist); temporaries left
        by an interrupted write are not listed."""
        sel = pafs.FileSelector(self.path, allow_not_found=True, recursive=False)
        try:
            infos = self._call("list", self.fs.get_file_info, sel)
        except FileNotFoundError:  # pyarrow's allow_not_found races with a concurrent mkdir
            return []
        return sorted(i.base_name for i in infos if ".tmp-" not in i.base_name)

    # -- writing ------------------------------------------------------------------------------
    def makedirs(self) -> None:
        """A directory on filesystems that have them; nothing on an object store (a key's prefix
        exists as soon as an object under it does)."""
        if not self.is_object_store:
            self.fs.create_dir(self.path, recursive=True)

    def write_bytes(self, data: bytes) -> None:
        """Atomically replace the file's content (see the module doc)."""
        if self.is_object_store:
            self._call("write", self._put, data)
            return
        parent = self.path.rsplit("/", 1)[0] or "/"
        self.fs.create_dir(parent, recursive=True)
        tmp = f"{self.path}.tmp-{uuid.uuid4().hex[:12]}"
        try:
            with self.fs.open_output_stream(tmp) as f:
                f.write(data)
                if self.fs.type_name == "local":
                    f.flush()
            if self.fs.type_name == "local":
                _fsync_path(tmp)
            self.fs.move(tmp, self.path)
        except BaseException:
            # e.g. a full disk: the partial temporary would keep its space and fail the retry too
            try:
                self.fs.delete_file(tmp)
            except OSError:
                pass  # never written, or gone: the write's own error is the one to report
            raise
        if self.fs.type_name == "local":
            _fsync_path(parent)

    def _put(self, data: bytes) -> None:
        with self.fs.open_output_stream(self.path) as f:
            f.write(data)

    def write_json(self, doc: Any) -> None:
        self.write_bytes(json.dumps(doc, sort_keys=True).encode())

    def delete(self) -> None:
        """Remove the file; a missing one is not an error."""
        self._call("delete", self._remove, self.fs.delete_file)

    def delete_dir(self) -> None:
        """Remove the directory and everything in it; a missing one is not an error. On an object
        store: every object under the prefix, one by one (some S3 servers map keys to files and
        answer a prefix's HEAD as if it were an object, which pyarrow's delete_dir refuses)."""
        if not self.is_object_store:
            self._remove(self.fs.delete_dir)
            return
        sel = pafs.FileSelector(self.path, allow_not_found=True, recursive=True)
        for info in self._call("list", self.fs.get_file_info, sel):
            if info.type == pafs.FileType.File:
                Location(self.fs, info.path, f"{self.uri}{info.path[len(self.path):]}").delete()

    def _remove(self, op: Any) -> None:
        try:
            op(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            if _TRANSIENT.search(str(exc)) and self.is_object_store:
                raise
            if self.exists():
                raise


class _PatientFile:
    """A read-only random-access file whose reads wait through an object store's outage: each is
    a ranged read at an explicit offset (`read_at`), so a retry cannot read from a moved position."""

    def __init__(self, loc: Location, f: Any) -> None:
        self._loc, self._f, self._pos = loc, f, 0
        self._size: int = loc._call("stat", f.size)
        self.closed = False

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def read(self, nbytes: int | None = None) -> bytes:
        n = self._size - self._pos if nbytes is None or nbytes < 0 else min(nbytes, self._size - self._pos)
        if n <= 0:
            return b""
        data = self._loc._call("read", self._f.read_at, n, self._pos)
        self._pos += len(data)
        return data  # a pyarrow Buffer: Arrow reads it without a copy

    def close(self) -> None:
        self.closed = True
        self._f.close()


def _one_put_per_write(fs: Any) -> Any:
    """The same S3 filesystem, but a small object goes out in one PutObject: by default pyarrow
    starts a multipart upload on open, three requests for every object however small."""
    rebuild, (options,) = fs.__reduce__()
    return rebuild({**options, "allow_delayed_open": True})


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
