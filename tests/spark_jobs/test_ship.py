"""spark_jobs.ship: the executors' archive is the wheel of exactly what pyproject.toml lists (its
package directories, mapped names included, without bytecode or dotfiles), named by a hash of those
sources and rebuilt only when one changes. Run on a tiny project of its own; the real wheel is
tests/project/test_packaging.py's."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from spark_jobs import ship

pytestmark = pytest.mark.dataplane
PYPROJECT = """
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "tiny"
version = "1.0"

[tool.setuptools]
packages = ["alpha", "alpha.sub", "beta"]
package-dir = { "beta" = "src/beta" }
"""


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    root = tmp_path / "repo"
    files = {"pyproject.toml": PYPROJECT, "alpha/__init__.py": "A = 1\n", "alpha/sub/__init__.py": "",
             "alpha/sub/mod.py": "X = 2\n", "src/beta/__init__.py": "B = 3\n", "alpha/__pycache__/m.cpython.pyc": "",
             "alpha/stale.pyc": "", "alpha/.editor-swap": "", "alpha/.git/HEAD": "", "docs/not-shipped.md": ""}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setattr(ship, "REPO", root)
    monkeypatch.setattr(ship, "PYPROJECT", root / "pyproject.toml")
    return root


def test_the_packages_are_pyprojects_top_level_ones_with_their_directories(repo):
    assert ship.package_dirs() == {"alpha": repo / "alpha", "beta": repo / "src" / "beta"}
    assert [f.relative_to(repo).as_posix() for f in ship._source_files()] == [
        "pyproject.toml", "alpha/__init__.py", "alpha/sub/__init__.py", "alpha/sub/mod.py", "src/beta/__init__.py"]


def test_the_hash_follows_the_sources_and_nothing_else(repo):
    first = ship.source_hash()
    assert len(first) == 16 and int(first, 16) >= 0 and ship.source_hash() == first
    (repo / "alpha" / "again.pyc").write_text("bytecode")
    (repo / "docs" / "more.md").write_text("docs")
    assert ship.source_hash() == first, "bytecode and files outside the packages do not count"
    (repo / "alpha" / "sub" / "mod.py").write_text("X = 3\n")
    changed = ship.source_hash()
    assert changed != first
    (repo / "alpha" / "sub" / "mod.py").rename(repo / "alpha" / "sub" / "other.py")
    assert ship.source_hash() not in (first, changed), "a renamed file is a change"


def test_the_archive_is_the_wheel_of_the_listed_packages_and_is_reused(repo, tmp_path, monkeypatch):
    dist = tmp_path / "dist"
    archive = ship.job_archive(dist)
    assert archive == dist / f"ballast-{ship.source_hash()}.zip"
    names = set(zipfile.ZipFile(archive).namelist())
    assert {"alpha/__init__.py", "alpha/sub/__init__.py", "alpha/sub/mod.py", "beta/__init__.py"} <= names
    assert not [n for n in names if "pycache" in n or n.endswith(".pyc") or "/." in n or n.startswith("docs")]
    assert not (repo / "build").exists() and not list(repo.glob("*.egg-info")), "the checkout stays clean"
    monkeypatch.setattr(ship, "build_wheel", lambda dest: pytest.fail("rebuilt an archive whose sources are unchanged"))
    assert ship.job_archive(dist) == archive and ship.py_files_args(dist) == ["--py-files", str(archive)]


def test_a_failed_build_says_what_ran(repo, tmp_path):
    (repo / "pyproject.toml").write_text(PYPROJECT.replace('"beta"]', '"beta", "gamma"]'))
    with pytest.raises(RuntimeError, match="building the ballast wheel failed: .* -m pip wheel"):
        ship.build_wheel(tmp_path / "out")


def test_without_pyproject_there_is_nothing_to_ship(repo):
    (repo / "pyproject.toml").unlink()
    with pytest.raises(RuntimeError, match="the job archive is built from a source checkout"):
        ship.package_dirs()


def test_the_command_line_says_how_to_use_it():
    with pytest.raises(SystemExit, match=r"usage: python -m spark_jobs.ship \[wheel DIR\]"):
        ship.main(["wheel"])
