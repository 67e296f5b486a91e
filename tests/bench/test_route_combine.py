"""bench.route_combine end to end on a small batch, in its own process (it starts and stops a local
Spark of its own): both variants of Q7 and Q5 timed, their plans one shuffle apart. Shapes, not times."""

from __future__ import annotations

import re

import pytest

from tests.helpers.procs import run_bench

pytestmark = [pytest.mark.bench, pytest.mark.slow]


def test_times_both_variants_and_the_combine_after_the_routing_saves_a_shuffle():
    out = run_bench("bench.route_combine", "--rows", "3000", "--rounds", "2")
    exchanges = {(q, v): int(n) for q, v, n in
                 re.findall(r"^(q[57])  (two shuffles|one shuffle): (\d+) exchange", out, re.MULTILINE)}
    assert exchanges == {("q7", "two shuffles"): 2, ("q7", "one shuffle"): 1,
                         ("q5", "two shuffles"): 2, ("q5", "one shuffle"): 1}, out
    times = re.findall(r"^(q[57])  (two shuffles|one shuffle)\s+(\d+) ms$", out, re.MULTILINE)
    assert len(times) == 4 and all(int(ms) > 0 for *_, ms in times), out
    assert len(re.findall(r"^q[57]  one / two \d+\.\d+$", out, re.MULTILINE)) == 2, out
