"""Each policy module imports alone in a fresh interpreter (what a static graph cannot show: an
import that works only because another module happened to be imported first).

That the policy's modules never import each other in a circle (planner <-> costmodel for `auto`
once, which worked only while one side imported lazily) is the `no-cycles` contract of
pyproject.toml, checked by `lint-imports` in `make lint` (it sees lazy and TYPE_CHECKING imports too).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.controlplane

POLICY = Path(__file__).resolve().parents[2] / "plugins" / "ballast" / "policy"
MODULES = sorted(f"ballast.policy.{p.stem}" for p in POLICY.glob("*.py") if p.stem != "__init__")


def test_the_policy_modules_are_found() -> None:
    assert {"ballast.policy.planner", "ballast.policy.costmodel", "ballast.policy.plan"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_each_policy_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
