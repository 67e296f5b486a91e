"""scripts/import_graph.py: the layer graph of this checkout points only down, scripts/ has no
cycle, and the script does see an upward edge, a forbidden one and a cycle when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts import import_graph as g

pytestmark = pytest.mark.foundation
REPO = Path(__file__).resolve().parents[2]


def test_this_checkout_points_only_down() -> None:
    out = subprocess.run([sys.executable, "scripts/import_graph.py"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "data plane -> core" in out.stdout and "metrics store -> schema" in out.stdout
    assert "UP" not in out.stdout and "cut by" not in out.stdout and "no cycle" in out.stdout


def test_the_layers_come_from_the_contract() -> None:
    table = g.layers(g.contracts())
    assert table[0] == ["dags"] and table[3] == ["spark_jobs"] and "ballast.protocol" in table[-1]
    assert g.layer_of("ballast.policy.ds2", table) == len(table) - 1
    assert g.layer_of("spark_jobs.runner", table) == 3 and g.layer_of("json", table) is None


def test_a_forbidden_edge_and_a_cycle_are_found(tmp_path: Path) -> None:
    cfg = g.contracts()
    assert g.cut_by("migrations_db.db", "ballast.options", cfg) == "schema-alone"
    assert g.cut_by("ballast.controller", "spark_jobs.runner", cfg) == "planes-apart"
    assert g.cut_by("spark_jobs.runner", "ballast.protocol", cfg) is None
    (tmp_path / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from b import X\n")
    (tmp_path / "b.py").write_text("def f():\n    import a\n")
    (tmp_path / "c.py").write_text("import os\n")
    edges = g.script_edges(tmp_path)
    assert edges == {"a": {"b"}, "b": {"a"}, "c": set()}
    assert g.find_cycle(edges) == ["a", "b", "a"]
    assert g.find_cycle({"a": {"b"}, "b": set()}) is None
