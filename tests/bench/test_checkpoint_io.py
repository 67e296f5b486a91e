"""bench.checkpoint_io end to end on a few micro-batches, in its own process (it starts and stops a local
Spark of its own): both checkpoint file managers timed, each phase's medians and ratio printed, and a
batch count that leaves nothing to count refused. Shapes, not times."""

from __future__ import annotations

import re

import pytest

from tests.helpers.procs import run_bench

pytestmark = [pytest.mark.bench, pytest.mark.slow]


def test_times_both_managers_per_phase(tmp_path):
    out = run_bench("bench.checkpoint_io", "--batches", "8", "--rounds", "2", "--dir", str(tmp_path))
    line = r"^(\w+)\s+default\s+(\d+\.\d) +epoch\s+(\d+\.\d) +epoch / default (\d+\.\d+)$"
    lines = re.findall(line, out, re.MULTILINE)
    assert [p for p, *_ in lines] == ["walCommit", "commitOffsets", "triggerExecution"], out
    assert all(float(d) > 0 and float(e) > 0 for _, d, e, _ in lines), out
    assert not list(tmp_path.iterdir()), "every checkpoint is removed"


def test_too_few_batches_are_refused():
    with pytest.raises(AssertionError, match="must be more than 6"):
        run_bench("bench.checkpoint_io", "--batches", "6")
