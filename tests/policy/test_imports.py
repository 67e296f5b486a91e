"""Each policy module imports alone, and the policy's modules never import each other in a circle.

A cycle (planner <-> costmodel for `auto` once) works only as long as one side imports lazily
inside a function; the static check below sees those imports too, and TYPE_CHECKING ones.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.controlplane

POLICY = Path(__file__).resolve().parents[2] / "plugins" / "ballast" / "policy"
MODULES = sorted(f"ballast.policy.{p.stem}" for p in POLICY.glob("*.py") if p.stem != "__init__")


def _policy_imports(path: Path) -> set[str]:
    """Every ballast.policy.* module named by an import anywhere in the file (also inside functions)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("ballast.policy."):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("ballast.policy."))
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of `graph` as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]  # on the stack = on the path
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_the_policy_modules_are_found() -> None:
    assert {"ballast.policy.planner", "ballast.policy.costmodel", "ballast.policy.plan"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_each_policy_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    out = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_policy_modules_import_each_other_without_a_cycle() -> None:
    graph = {f"ballast.policy.{p.stem}": _policy_imports(p) for p in POLICY.glob("*.py") if p.stem != "__init__"}
    assert graph["ballast.policy.planner"] >= {"ballast.policy.costmodel"}  # `auto` asks the cost model
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
