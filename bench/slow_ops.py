"""Key count with a fixed CPU cost per record, for experiments that need an operator whose work per
row is a sizeable part of an epoch (the autotune experiment: the trigger interval that meets a
latency goal depends on c·λ, the share of a second the workers spend on one second of input, and
the key count's own few µs per row keep c·λ near zero at any rate one generator can send).

The cost is CPU (this thread's, measured by `time.thread_time`), not sleep: the worker's
`useful_ms` counts it as the operator's work, so DS2 and the autotuner see it as a slower
operator, as they would a real one. `BALLAST_BENCH_ROW_US` (the job's environment, which local
Spark's Python workers inherit) sets it; 300 µs by default.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ballast.options import settings
from spark_jobs.operators import KeyCount, Output

ROW_US = settings().bench_row_us


class SlowKeyCount(KeyCount):
    """KeyCount's state and outputs, plus `ROW_US` µs of busy CPU per record."""

    name = "slowcount"

    def fold(self, key: bytes, state: bytes | None, values: Sequence[bytes]) -> tuple[bytes | None, list[Output]]:
        # this thread's CPU time, not the clock: on a busy machine a clock-timed loop spends less
        # CPU the more it is preempted, and the operator's cost per record would vary with the load
        end = time.thread_time() + len(values) * ROW_US / 1e6
        while time.thread_time() < end:
            pass
        return super().fold(key, state, values)
