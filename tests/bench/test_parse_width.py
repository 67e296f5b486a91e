"""bench.parse_width end to end on a small batch, in its own process (it starts and stops a local
Spark of its own): every variant of each query is timed and its ratio to native printed. Shapes,
not times."""

from __future__ import annotations

import re

import pytest

from tests.helpers.procs import run_bench

pytestmark = [pytest.mark.bench, pytest.mark.slow]


def test_prints_every_variants_ratio_to_native():
    out = run_bench("bench.parse_width", "--rows", "3000", "--rounds", "2")
    line = (r"^(q[127])\s+(native|ballast, union schema|ballast, declared fields)\s+\d+ ms"
            r"\s+ratio (\d+\.\d+)$")
    lines = re.findall(line, out, re.MULTILINE)
    assert {(q, v) for q, v, _ in lines} == {(q, v) for q in ("q1", "q2", "q7") for v in
                                            ("native", "ballast, union schema", "ballast, declared fields")}
    assert all(float(r) == 1.0 for _, v, r in lines if v == "native") and all(float(r) > 0 for *_, r in lines)
    parses = dict(re.findall(r"^(q[127])  declared fields: from_json (\d+) time", out, re.MULTILINE))
    assert parses == {"q1": "1", "q2": "1", "q7": "1"}, "the parse's barrier keeps one parse per row"
