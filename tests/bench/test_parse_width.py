"""bench.parse_width end to end on a small batch, in its own process (it starts and stops a local
Spark of its own): every variant of each query is timed and its ratio to native printed. Shapes,
not times."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.bench, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]


def test_prints_every_variants_ratio_to_native():
    res = subprocess.run([sys.executable, "-m", "bench.parse_width", "--rows", "3000", "--rounds", "2"], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    line = (r"^(q[127])\s+(native|ballast, union schema|ballast, declared fields)\s+\d+ ms"
            r"\s+ratio (\d+\.\d+)$")
    lines = re.findall(line, res.stdout, re.MULTILINE)
    assert {(q, v) for q, v, _ in lines} == {(q, v) for q in ("q1", "q2", "q7") for v in
                                            ("native", "ballast, union schema", "ballast, declared fields")}
    assert all(float(r) == 1.0 for _, v, r in lines if v == "native") and all(float(r) > 0 for *_, r in lines)
    parses = dict(re.findall(r"^(q[127])  declared fields: from_json (\d+) time", res.stdout, re.MULTILINE))
    assert parses == {"q1": "1", "q2": "1", "q7": "1"}, "the parse's barrier keeps one parse per row"
