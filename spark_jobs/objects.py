"""Durable objects: the file format of one task attempt's changes and outputs (changelog) or of a
worker's whole state (snapshot), and their names.

An object is an Arrow IPC file written once by one task attempt: record batches of per-bin state
changes (consecutive bins share a batch; the index in the schema metadata says where each bin's
rows are, so one bin is read with one bounded read), then one batch of the epoch's outputs and dead
letters. The schema metadata also carries the task's metrics, so the driver learns a worker's
metrics without opening any store. Where objects live and how they make up a bin's state is
spark_jobs.durable.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_jobs.storage import Location

FORMAT = 2  # 2: bins share record batches (index: bin, batch, offset, length); 1 is still read
META_KEY = b"ballast"
PUT, DELETE, OUTPUT, DEAD_LETTER = 0, 1, 2, 3
SCHEMA = pa.schema([
    ("kind", pa.int8()), ("bin", pa.int32()), ("key", pa.binary()), ("value", pa.binary()), ("note", pa.string()),
])

def epoch_name(epoch: int) -> str:
    return f"{epoch:012d}"


def object_name(worker: int, attempt: str) -> str:
    return f"w{worker:04d}-{attempt}.arrow"


def new_attempt_id(stage: int, attempt: int) -> str:
    """Unique per task attempt; sorts by stage and attempt first (for people reading listings)."""
    return f"s{stage}a{attempt}-{uuid.uuid4().hex[:10]}"


CHUNK_ROWS = 65_536  # rows per record batch: few batches at B = 4096, still a bounded read per bin
# ... and bytes per record batch: reading one bin reads its whole batch, so with large values (1 KiB:
# 64 MiB per 65 536 rows) a bin of a few hundred KB cost a 64 MiB read per object (bench spike-1)
CHUNK_BYTES = 2 << 20


@dataclass
class ObjectWriter:
    """Collects one task attempt's object: per-bin state changes (in bin order), then outputs.

    Consecutive bins share a record batch of up to CHUNK_ROWS rows and CHUNK_BYTES bytes (a bin
    larger than that has a batch of its own), and the index says where each bin's rows are (batch,
    offset, length): one batch per bin cost ~100 ms per epoch at B = 4096, while reading one bin
    still reads one bounded batch, not the whole object."""

    meta: dict[str, Any]
    _index: list[list[int]] = field(default_factory=list)  # [bin, batch, offset, length]
    _keys: list[bytes] = field(default_factory=list)
    _values: list[bytes | None] = field(default_factory=list)
    _bins: list[int] = field(default_factory=list)
    _nbytes: int = 0  # keys and values in the batch being collected
    _batches: list[pa.RecordBatch] = field(default_factory=list)
    _outputs: list[tuple[int, bytes, bytes, str | None]] = field(default_factory=list)

    def add_bin(self, b: int, keys: list[bytes], values: list[bytes | None]) -> None:
        """Changes of one bin (None value = delete); bins must come in increasing order."""
        if self._index and b <= self._index[-1][0]:
            raise ValueError(f"bins must be added in increasing order ({b} after {self._index[-1][0]})")
        nbytes = sum(map(len, keys)) + sum(len(v) for v in values if v is not None)
        if self._keys and (len(self._keys) + len(keys) > CHUNK_ROWS or self._nbytes + nbytes > CHUNK_BYTES):
            self._flush()
        self._nbytes += nbytes
        self._index.append([b, len(self._batches), len(self._keys), len(keys)])
        self._keys.extend(keys)
        self._values.extend(values)
        self._bins.extend([b] * len(keys))

    def add_bins(self, bins: Sequence[int], keys: list[bytes], values: list[bytes | None]) -> None:
        """The changes of many bins at once: row i is in bin `bins[i]`, bins non-decreasing (and after
        every bin added before). Same object as `add_bin` per bin, without a Python call per bin: an
        epoch at B = 4096 touches a bin for almost every row."""
        b = np.asarray(bins, dtype=np.int64)
        if not len(b):
            return
        if (np.diff(b) < 0).any():
            raise ValueError("bins must be added in increasing order")
        starts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
        ub, counts = b[starts].tolist(), np.diff(np.r_[starts, len(b)])
        if self._index and ub[0] <= self._index[-1][0]:
            raise ValueError(f"bins must be added in increasing order ({ub[0]} after {self._index[-1][0]})")
        ends = np.cumsum(counts)
        sizes = np.fromiter((len(k) + (len(v) if v is not None else 0) for k, v in zip(keys, values)), np.int64,
                            count=len(keys))
        bend = np.cumsum(np.add.reduceat(sizes, starts))  # bytes up to the end of each bin
        i = 0
        while i < len(ub):  # per record batch: the bins that fit in it (add_bin's cut, for many bins)
            room = CHUNK_ROWS - len(self._keys) + (ends[i - 1] if i else 0)
            room_bytes = CHUNK_BYTES - self._nbytes + (bend[i - 1] if i else 0)
            j = min(int(np.searchsorted(ends, room, side="right")),
                    int(np.searchsorted(bend, room_bytes, side="right")))
            if j <= i:  # the next bin does not fit: a new batch, or alone in one if it is larger
                if self._keys:
                    self._flush()
                    continue
                j = i + 1
            lo = int(starts[i])
            hi = int(ends[j - 1])
            self._nbytes += int(bend[j - 1] - (bend[i - 1] if i else 0))
            batch, base = len(self._batches), len(self._keys) - lo
            self._index.extend([x, batch, base + s, c]
                               for x, s, c in zip(ub[i:j], starts[i:j].tolist(), counts[i:j].tolist()))
            self._keys.extend(keys[lo:hi])
            self._values.extend(values[lo:hi])
            self._bins.extend(b[lo:hi].tolist())
            i = j

    def _flush(self) -> None:
        if not self._keys:
            return
        n = len(self._keys)
        values = pa.array(self._values, pa.binary())
        kinds = pc.if_else(values.is_null(), pa.scalar(DELETE, pa.int8()), pa.scalar(PUT, pa.int8()))
        self._batches.append(pa.RecordBatch.from_arrays(
            [kinds, pa.array(self._bins, pa.int32()), pa.array(self._keys, pa.binary()),
             values, pa.nulls(n, pa.string())], schema=SCHEMA))
        self._keys, self._values, self._bins = [], [], []
        self._nbytes = 0

    def add_output(self, kind: int, key: bytes, value: bytes, note: str | None = None) -> None:
        self._outputs.append((kind, key, value, note))

    @property
    def outputs(self) -> list[tuple[int, bytes, bytes, str | None]]:
        return list(self._outputs)

    def to_bytes(self) -> bytes:
        self._flush()
        batches = list(self._batches)
        out_index = -1
        if self._outputs:
            kinds, keys, values, notes = zip(*self._outputs)
            out_index = len(batches)
            batches.append(pa.RecordBatch.from_arrays(
                [pa.array(kinds, pa.int8()), pa.array([-1] * len(keys), pa.int32()), pa.array(keys, pa.binary()),
                 pa.array(values, pa.binary()), pa.array(notes, pa.string())], schema=SCHEMA))
        doc = {**self.meta, "format": FORMAT, "bins": self._index, "outputs_batch": out_index}
        schema = SCHEMA.with_metadata({META_KEY: json.dumps(doc).encode()})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as w:
            for rb in batches:
                w.write_batch(rb)
        return sink.getvalue().to_pybytes()


class ObjectReader:
    """Reads one object; opens the file once and each bin's batch on demand."""

    def __init__(self, loc: Location) -> None:
        self.loc = loc
        self._file = loc.open_random()
        self._reader = pa.ipc.open_file(self._file)
        self.meta: dict[str, Any] = json.loads(self._reader.schema.metadata[META_KEY])
        if int(self.meta.get("format", 1)) < 2:  # format 1: one record batch per bin
            self._index = {int(b): (i, 0, self._reader.get_batch(i).num_rows) for i, b in enumerate(self.meta["bins"])}
        else:
            self._index = {int(b): (int(i), int(off), int(n)) for b, i, off, n in self.meta["bins"]}
        self._batch: tuple[int, Any] | None = None

    def close(self) -> None:
        self._file.close()

    @property
    def bins(self) -> list[int]:
        return sorted(self._index)

    def bin_changes(self, b: int) -> tuple[list[bytes], list[bytes | None]]:
        """(store keys, values or None for deletes) of bin b; empty when the bin had none."""
        where = self._index.get(b)
        if where is None:
            return [], []
        i, off, n = where
        if n == 0:  # an empty bin is listed (the object covers it) but owns no rows, maybe not even a batch
            return [], []
        if self._batch is None or self._batch[0] != i:
            self._batch = (i, self._reader.get_batch(i))
        rb = self._batch[1].slice(off, n)
        return rb.column(2).to_pylist(), rb.column(3).to_pylist()

    def outputs(self) -> list[tuple[int, bytes, bytes, str | None]]:
        i = int(self.meta.get("outputs_batch", -1))
        if i < 0:
            return []
        rb = self._reader.get_batch(i)
        return list(zip(rb.column(0).to_pylist(), rb.column(2).to_pylist(), rb.column(3).to_pylist(),
                        rb.column(4).to_pylist()))


def read_meta(loc: Location) -> dict[str, Any]:
    r = ObjectReader(loc)
    try:
        return r.meta
    finally:
        r.close()
