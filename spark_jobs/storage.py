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
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow.fs as pafs

_RENAME_ATOMIC = ("local", "hdfs", "mock")


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

    # -- reading ------------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def read_bytes(self) -> bytes | None:
        """The whole file, or None when it does not exist."""
        try:
            with self.fs.open_input_stream(self.path) as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
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
        """A random-access file (for Arrow IPC footers and single record batches)."""
        return self.fs.open_input_file(self.path)

    def list(self) -> list[str]:
        """Names directly inside this directory (empty when it does not exist); temporaries left
        by an interrupted write are not listed."""
        sel = pafs.FileSelector(self.path, allow_not_found=True, recursive=False)
        try:
            infos = self.fs.get_file_info(sel)
        except FileNotFoundError:  # pyarrow's allow_not_found races with a concurrent mkdir
            return []
        return sorted(i.base_name for i in infos if ".tmp-" not in i.base_name)

    # -- writing ------------------------------------------------------------------------------
    def makedirs(self) -> None:
        self.fs.create_dir(self.path, recursive=True)

    def write_bytes(self, data: bytes) -> None:
        """Atomically replace the file's content (see the module doc)."""
        parent = self.path.rsplit("/", 1)[0] or "/"
        self.fs.create_dir(parent, recursive=True)
        if self.fs.type_name in _RENAME_ATOMIC:
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
        else:
            with self.fs.open_output_stream(self.path) as f:
                f.write(data)

    def write_json(self, doc: Any) -> None:
        self.write_bytes(json.dumps(doc, sort_keys=True).encode())

    def delete(self) -> None:
        """Remove the file; a missing one is not an error."""
        self._remove(self.fs.delete_file)

    def delete_dir(self) -> None:
        """Remove the directory and everything in it; a missing one is not an error."""
        self._remove(self.fs.delete_dir)

    def _remove(self, op: Any) -> None:
        try:
            op(self.path)
        except FileNotFoundError:
            pass
        except OSError:
            if self.exists():
                raise


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
