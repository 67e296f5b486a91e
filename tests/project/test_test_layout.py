"""The suite's own layout: test directories are not packages (pytest's default import mode puts
each test module on sys.path by its basename), so two test files with one basename in different
directories fail collection of the whole suite. Caught here in milliseconds, with both paths."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_test_file_basenames_are_unique() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for p in TESTS.rglob("test_*.py"):
        where[p.name].append(str(p.relative_to(TESTS.parent)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"rename one of each pair (e.g. test_<module>_job.py for a system test): {clashes}"
