"""bench.adaptive end to end on a small batch, in its own process (it starts and stops a local Spark
of its own): Q7's and Q5's epoch job timed with and without adaptive execution, per batch size, and a
refused round count. Shapes, not times."""

from __future__ import annotations

import re

import pytest

from tests.helpers.procs import run_bench

pytestmark = [pytest.mark.bench, pytest.mark.slow]


def test_times_both_variants_per_query_and_batch_size():
    out = run_bench("bench.adaptive", "--rows", "1500", "--rounds", "3")
    lines = re.findall(r"^(q[57])\s+(\d+) rows  adaptive\s+(\d+) ms  epoch\s+(\d+) ms  epoch / adaptive (\d+\.\d+)$",
                       out, re.MULTILINE)
    assert [(q, int(n)) for q, n, *_ in lines] == [("q7", 1500), ("q5", 1500)], out
    assert all(int(a) > 0 and int(e) > 0 and float(r) > 0 for *_, a, e, r in lines), out


def test_too_few_rounds_are_refused():
    with pytest.raises(AssertionError, match="must be more than the 2 warm-up rounds"):
        run_bench("bench.adaptive", "--rounds", "2")
