"""The experiments, one module each (`migration` and `bins`, `native`, `ds2`, `latency`; `cluster` is
the bench.cluster package). Each writes its CSVs, PNGs and a Markdown section under its own directory of the
run and returns the figures that go into summary.json. What they share is in `common`.
"""

from bench.experiments.common import (
    FULL,
    SMOKE,
    STRATEGIES,
    Ctx,
    Profile,
    _gen_stats,
    _prefill,
    _prog_end,
    _read_progress,
    _start_gen,
    catchup_rate,
    wait_steady,
)

__all__ = ["FULL", "SMOKE", "STRATEGIES", "Ctx", "Profile", "_gen_stats", "_prefill", "_prog_end", "_read_progress",
           "_start_gen", "catchup_rate", "wait_steady"]
