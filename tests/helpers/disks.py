"""A full disk for real: a small tmpfs mounted for one test (root or CAP_SYS_ADMIN), and a filler
that writes until ENOSPC. Shared by the cache-fallback unit tests and the cache-disk system test."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(mnt: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (e.g. "8m") at `mnt` for the `with` block; the test fails (never skips)
    where it cannot be mounted."""
    mnt.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.fail(f"`mount -t tmpfs` failed ({res.stderr.strip()}): this test needs root (or CAP_SYS_ADMIN)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt: Path) -> int:
    """Write a filler file under `mnt` until the disk is full; returns its size."""
    n = 0
    with open(mnt / "filler", "wb", buffering=0) as f:
        chunk = b"\0" * 65536
        while True:
            try:
                n += f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return n
