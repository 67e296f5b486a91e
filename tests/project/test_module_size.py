"""Issue 23, item 3: no module of the project's code is over 400 lines, so each one stays a single
concern that a reader takes in at once. Tests and bench/ are left out (a test file mirrors its
module's behaviour, however long the list of cases), and so are Alembic revisions: a revision is
written once, never edited afterwards, and is one migration however many tables it touches."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.foundation
REPO = Path(__file__).resolve().parents[2]
TREES = ("plugins", "spark_jobs", "dags", "migrations_db", "scripts")
REVISIONS = REPO / "migrations_db" / "alembic" / "versions"
MAX_LINES = 400


def _lines(path: Path) -> int:
    """What `wc -l` counts: the newlines in the file."""
    return path.read_bytes().count(b"\n")


def _modules() -> list[Path]:
    found = []
    for tree in TREES:
        for p in sorted((REPO / tree).rglob("*.py")):
            if "__pycache__" in p.parts or p.is_relative_to(REVISIONS):
                continue
            found.append(p)
    return found


def test_the_trees_are_where_this_test_looks() -> None:
    names = {p.relative_to(REPO).as_posix() for p in _modules()}
    for known in ("plugins/ballast/protocol.py", "spark_jobs/runner.py", "dags/ballast_rebalance.py",
                  "migrations_db/models.py", "scripts/demo.py"):
        assert known in names, f"{known} is not found: the size rule would check nothing there"


def test_no_module_is_over_400_lines() -> None:
    over = {p.relative_to(REPO).as_posix(): n for p in _modules() if (n := _lines(p)) > MAX_LINES}
    listed = ", ".join(f"{name} ({n} lines)" for name, n in sorted(over.items(), key=lambda kv: -kv[1]))
    assert not over, (f"{len(over)} module(s) over {MAX_LINES} lines; move a concern of each into a module "
                      f"of its own: {listed}")
