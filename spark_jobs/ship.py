"""The code Spark ships to executors: the project's wheel, renamed `.zip`, for `--py-files`.

Executors on other hosts have neither this checkout nor the venv's editable install, so the three
packages (`ballast`, `spark_jobs`, `migrations_db`) travel with the job. PySpark puts only `.zip`,
`.egg` and `.jar` files from `--py-files` / `SparkContext.addPyFile` on the workers' `sys.path`
(not `.whl`); a pure-Python wheel is a zip with the packages at its top level, so the archive is
the wheel itself under a `.zip` name, importable by `zipimport`.

Why the wheel (setuptools through `pip wheel --no-deps --no-build-isolation --no-index`) rather than
zipping the package directories by hand: pyproject.toml stays the one definition of what is
shipped (package list, `ballast` -> `plugins/ballast`, Alembic env/versions/mako as package data),
and `make wheel` and the executors' archive are the same artifact. The build runs on a clean copy
of the sources in a temporary directory, so it never writes `build/` or `*.egg-info` into the
checkout, cannot pick up stale modules from an old `build/lib`, cannot collide with a concurrent
build, and carries no `__pycache__`. It costs ~1.5 s and happens only when the sources change: the
archive is named by a hash of pyproject.toml and every file of the package directories, and reused
while that hash matches. Old archives are left in place (a running driver may still read one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from ballast.options import settings

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = REPO / "pyproject.toml"
DIST_DIR = settings().cache_dir / "dist"
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


def package_dirs() -> dict[str, Path]:
    """Top-level package -> its source directory, from pyproject.toml's `[tool.setuptools]`."""
    if not PYPROJECT.is_file():
        raise RuntimeError(f"{PYPROJECT} missing: the job archive is built from a source checkout")
    st = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    mapping = st.get("package-dir", {})
    return {p: REPO / mapping.get(p, p) for p in st["packages"] if "." not in p}


def _source_files() -> list[Path]:
    """pyproject.toml and every file under the package directories, minus bytecode and dotfiles."""
    files = [PYPROJECT]
    for root in package_dirs().values():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            files += [Path(dirpath, f) for f in sorted(filenames)
                      if not f.startswith(".") and Path(f).suffix not in _SKIP_SUFFIXES]
    return files


def source_hash() -> str:
    """16 hex digits over the relative paths and contents of the files a build reads."""
    h = hashlib.sha256()
    for f in _source_files():
        h.update(f.relative_to(REPO).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _install(src: Path, dest: Path) -> Path:
    """Copy `src` to `dest` atomically (temporary name in the same directory, then rename)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)
    return dest


def build_wheel(dest_dir: str | Path) -> Path:
    """Build the project's wheel from a clean copy of the sources into `dest_dir`; its path."""
    with tempfile.TemporaryDirectory(prefix="ballast-wheel-") as tmp:
        src, out = Path(tmp, "src"), Path(tmp, "out")
        for f in _source_files():
            (src / f.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, src / f.relative_to(REPO))
        cmd = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
               "--no-index", "-w", str(out), str(src)]
        env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        wheels = list(out.glob("*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise RuntimeError(f"building the ballast wheel failed: {' '.join(cmd)}\n{done.stdout}{done.stderr}")
        return _install(wheels[0], Path(dest_dir) / wheels[0].name)


def job_archive(dest_dir: str | Path | None = None) -> Path:
    """The executors' archive `<dest_dir>/ballast-<source hash>.zip` (default `.cache/dist/`),
    built if missing, reused while the sources are unchanged."""
    dest = Path(dest_dir) if dest_dir is not None else DIST_DIR
    target = dest / f"ballast-{source_hash()}.zip"
    if target.is_file():
        return target
    with tempfile.TemporaryDirectory(prefix="ballast-archive-") as tmp:
        return _install(build_wheel(tmp), target)


def py_files_args(dest_dir: str | Path | None = None) -> list[str]:
    """spark-submit arguments that ship the packages: `["--py-files", <archive>]`."""
    return ["--py-files", str(job_archive(dest_dir))]


def main(argv: list[str] | None = None) -> None:
    """`python -m spark_jobs.ship` prints the archive's path; `... wheel DIR` builds the wheel into DIR."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["wheel"] and len(args) == 2:
        print(build_wheel(args[1]))
    elif not args:
        print(job_archive())
    else:
        raise SystemExit("usage: python -m spark_jobs.ship [wheel DIR]")


if __name__ == "__main__":
    main()
