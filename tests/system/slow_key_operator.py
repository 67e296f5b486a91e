"""A user operator for the critical-path test: key count whose fold sleeps on one key, so the
worker that owns that key's bin is slow in every epoch that has the key."""

from __future__ import annotations

import time
from collections.abc import Sequence

from spark_jobs.operators import KeyCount, Output

SLOW_KEY = b"slow"
SLEEP_S = 2.0  # long enough that the fold leads even when a loaded machine slows Spark's own stages


class SlowKeyCount(KeyCount):
    name = "slowkeycount"

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        if key == SLOW_KEY:
            time.sleep(SLEEP_S)
        return super().fold(key, state, values)
