"""The spike experiment's operator: key-count with a large state value per key.

`PaddedCount` folds like `keycount` (output `(key, count)` once per key per epoch) but stores the count
followed by `BALLAST_BENCH_VALUE_BYTES` (default 1024) bytes of padding, so a job reaches GBs of state
with a key count the Python load generator can prefill in minutes. The padding is a function of the key
(blake2b of it, repeated), so a replayed fold writes the same bytes (operators must be deterministic)
and the values do not shrink under any compression. Run it as `--operator bench.padded:PaddedCount`; the
size comes from the job's environment (its Spark Python workers inherit it in local mode).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from ballast.options import env_var, settings
from spark_jobs.operators import KeyCount, Output

ENV = env_var("bench_value_bytes")


def value_bytes() -> int:
    return settings().bench_value_bytes


def padding(key: bytes, n: int) -> bytes:
    block = hashlib.blake2b(key).digest()  # 64 bytes
    return (block * (n // len(block) + 1))[:n]


class PaddedCount(KeyCount):
    name = "paddedcount"

    def __init__(self) -> None:
        self.pad = max(0, value_bytes() - 8)

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        count = (struct.unpack(">q", state[:8])[0] if state else 0) + len(values)
        # the padding is the key's, unchanged by an update: only the first write of a key computes it
        pad = state[8:] if state and len(state) == 8 + self.pad else padding(key, self.pad)
        return struct.pack(">q", count) + pad, [(key, b"%d" % count)]
