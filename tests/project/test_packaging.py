"""Packaging: the editable install (no hand-written .pth), and the archive Spark ships to executors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from spark_jobs import ship

pytestmark = [pytest.mark.foundation, pytest.mark.services]  # builds wheels, spark-submit
REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("ballast", "spark_jobs", "migrations_db")
MUST_SHIP = ["spark_jobs/worker.py", "ballast/protocol.py", "ballast/policy/ds2.py", "ballast/store/writer.py",
             "migrations_db/alembic/env.py", "migrations_db/alembic/script.py.mako", "migrations_db/alembic.ini"]


def _run_isolated(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -c code` from `cwd`, without PYTHONPATH (only what the venv itself provides)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def _shipped_sources() -> set[str]:
    """Every .py under the package directories, as a wheel would name it."""
    names = set()
    for pkg, root in ship.package_dirs().items():
        names |= {f"{pkg}/{p.relative_to(root).as_posix()}" for p in root.rglob("*.py")
                  if "__pycache__" not in p.parts}
    return names


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    return ship.job_archive(tmp_path_factory.mktemp("dist"))


def test_no_pth_puts_the_repo_on_the_path():
    site = Path(sysconfig.get_paths()["purelib"])
    assert not (site / "ballast-dev.pth").exists()
    offenders = [p.name for p in site.glob("*.pth") if str(REPO) in p.read_text(errors="replace")]
    assert offenders == []


def test_packages_import_from_any_cwd(tmp_path):
    out = _run_isolated("import ballast.protocol, ballast.policy, spark_jobs.runner, migrations_db.db; "
                        "print(ballast.protocol.__file__)", tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(REPO / "plugins" / "ballast" / "protocol.py")


def test_archive_holds_the_packages_and_no_bytecode(archive):
    names = set(zipfile.ZipFile(archive).namelist())
    for rel in MUST_SHIP:
        src = ship.package_dirs()[rel.split("/")[0]] / rel.split("/", 1)[1]
        assert src.is_file(), f"{src} moved: update MUST_SHIP"
        assert rel in names
    # a package directory missing from pyproject.toml's list would be missing here
    assert _shipped_sources() <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith((".pyc", ".pyo"))]
    assert re.fullmatch(r"ballast-[0-9a-f]{16}\.zip", archive.name)


def test_archive_is_reused_until_a_source_changes(tmp_path, monkeypatch):
    # on a private copy of the sources, so edits others make to the checkout meanwhile do not count
    copy, dist = tmp_path / "repo", tmp_path / "dist"
    for f in ship._source_files():
        (copy / f.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
        (copy / f.relative_to(REPO)).write_bytes(f.read_bytes())
    monkeypatch.setattr(ship, "REPO", copy)
    monkeypatch.setattr(ship, "PYPROJECT", copy / "pyproject.toml")
    first = ship.job_archive(dist)
    mtime = first.stat().st_mtime_ns
    assert ship.py_files_args(dist) == ["--py-files", str(first)]
    assert first.stat().st_mtime_ns == mtime and [p.name for p in dist.iterdir()] == [first.name]
    (copy / "spark_jobs" / "bins.py").write_text((copy / "spark_jobs" / "bins.py").read_text() + "\n# edited\n")
    second = ship.job_archive(dist)
    assert second != first and "# edited" in zipfile.ZipFile(second).read("spark_jobs/bins.py").decode()


def test_packages_import_from_the_archive_alone(archive, tmp_path):
    # sys.path beats the editable install's finder (appended to sys.meta_path); dropping that finder
    # as well proves the archive is self-sufficient for all three packages
    code = (
        f"import sys; z = {str(archive)!r}; sys.path.insert(0, z)\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f).lower()]\n"
        "import spark_jobs.bins, ballast.protocol, ballast.policy.ds2, migrations_db.models\n"
        "assert spark_jobs.bins.__file__.startswith(z), spark_jobs.bins.__file__\n"
        f"ours = [m for n, m in list(sys.modules.items()) if n.split('.')[0] in {PACKAGES!r}]\n"
        "bad = [m.__name__ for m in ours if not (getattr(m, '__file__', None) or z).startswith(z)]\n"
        "assert not bad, bad\n"
        "print(len(ours))\n"
    )
    out = _run_isolated(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 5


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return ship.build_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_contains_the_three_packages(wheel):
    assert wheel.name.startswith("ballast-") and wheel.suffix == ".whl"
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"{p}/__init__.py" for p in PACKAGES} <= names
    assert set(MUST_SHIP) <= names and _shipped_sources() <= names


def test_migrations_run_from_an_installed_copy(wheel, tmp_path):
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)  # what installing a pure-Python wheel lays down
    db = tmp_path / "m.db"
    code = (
        f"import sys; sys.path.insert(0, {str(site)!r})\n"
        "import migrations_db.db as d, sqlalchemy as sa\n"
        f"assert d.__file__.startswith({str(site)!r}), d.__file__\n"
        f"url = 'sqlite:///{db}'; d.migrate(url)\n"
        "print(sorted(sa.inspect(sa.create_engine(url)).get_table_names()))\n"
    )
    out = _run_isolated(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "ballast_alembic_version" in out.stdout


def test_spark_submit_launch_ships_the_archive(monkeypatch):
    from ballast import supervisor
    from ballast.config import JobConfig

    monkeypatch.setenv("AIRFLOW_CONN_BALLAST_TEST_SPARK", "spark://local")
    cfg = JobConfig(job="j", operator="op", input_topic="t", launcher="spark-submit",
                    spark_conn_id="ballast_test_spark")
    shipped = Path(supervisor.spark_submit_kwargs(cfg, "127.0.0.1:9092")["py_files"])
    assert shipped == ship.job_archive() and shipped.is_file()
