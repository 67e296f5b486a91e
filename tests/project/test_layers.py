"""The import contracts of pyproject.toml (`lint-imports`, run by `make lint`): this checkout keeps
them, and a copy with an import that runs back up breaks them, naming the import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.foundation
REPO = Path(__file__).resolve().parents[2]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")
TREES = ("plugins/ballast", "spark_jobs", "migrations_db", "dags")


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{root / 'plugins'}{os.pathsep}{root}"}
    return subprocess.run([LINT_IMPORTS, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_this_checkout_keeps_every_contract() -> None:
    out = _lint_imports(REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "no import cycles between sibling modules KEPT" in out.stdout


def test_an_import_back_up_or_round_breaks_a_contract(tmp_path: Path) -> None:
    for tree in TREES:
        shutil.copytree(REPO / tree, tmp_path / tree, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    with (tmp_path / "plugins/ballast/config.py").open("a") as f:
        f.write("\nfrom spark_jobs.operators import OPERATORS  # noqa: E402\n")
    with (tmp_path / "migrations_db/models.py").open("a") as f:
        f.write("\nfrom ballast.options import settings  # noqa: E402\n")
    with (tmp_path / "spark_jobs/operators.py").open("a") as f:
        f.write("\ndef _late():\n    from spark_jobs.processing import ProcessorOperator\n")
    (tmp_path / "plugins/ballast/unplaced.py").write_text('"""A new module nobody put in a layer."""\n')
    out = _lint_imports(tmp_path)
    assert out.returncode != 0
    for broken in ("ballast.config is not allowed to import spark_jobs",
                   "migrations_db is not allowed to import ballast",
                   "No cycles are allowed in spark_jobs", "ballast.unplaced"):
        assert broken in " ".join(out.stdout.split()), out.stdout
