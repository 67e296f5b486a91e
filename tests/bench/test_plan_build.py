"""bench.plan_build in its own process (a local Spark of its own): both ways of making the epoch's
task are built for Q7 and Q5 and their medians and ratio printed; the hand-off dedup against the
checkout's own last commit takes the same rows. Shapes, not times."""

from __future__ import annotations

import re

import pytest

from tests.helpers.procs import run_bench

pytestmark = [pytest.mark.bench, pytest.mark.slow]


def test_builds_both_ways_of_making_the_task_for_q7_and_q5():
    out = run_bench("bench.plan_build", "--builds", "3", "--rounds", "2", "--handoff-against", "HEAD")
    times = re.findall(r"^(q[57])  (closure|static)\s+(\d+\.\d) ms$", out, re.MULTILINE)
    assert sorted((q, v) for q, v, _ in times) == [("q5", "closure"), ("q5", "static"),
                                                   ("q7", "closure"), ("q7", "static")], out
    assert all(float(ms) > 0 for *_, ms in times), out
    assert len(re.findall(r"^q[57]  static / closure \d+\.\d+$", out, re.MULTILINE)) == 2, out
    assert re.search(r"^handoff  same rows taken: True \(\d+ of 200\)$", out, re.MULTILINE), out
    assert len(re.findall(r"^handoff  (this|HEAD)\s+\d+\.\d ms$", out, re.MULTILINE)) == 2, out
