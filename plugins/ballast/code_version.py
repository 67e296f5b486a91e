"""What an `upgrade` control step deploys: a version of a stateful processor's code.

Apart from ballast.protocol because it is a payload of its own, as ballast.protocol.Settings is for
settings steps, and the protocol module holds the envelope. Framework-free: the control side
builds it from the `ballast_upgrade` DAG's params, the data plane reads it back (docs/protocol.md,
"Upgrade steps"; docs/operators.md, "Upgrading a processor live").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ballast.errors import BallastError

MAX_REF_CHARS = 200  # package.module:Class, as an operator's name (String(200) columns)
MAX_VERSION_CHARS = 50
MAX_PY_FILES = 16
MAX_PATH_CHARS = 1000
PY_FILE_SUFFIXES = (".py", ".zip", ".egg")  # what SparkContext.addPyFile ships to the Python workers
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


class CodeVersionError(BallastError, ValueError):
    """An upgrade's code field that cannot be understood; the message says which part and why."""


@dataclass(frozen=True)
class CodeVersion:
    """One version of a processor: `ref` (`package.module:Class`, the class to run), `version` (its
    label: the class's `ballast_version` must say the same, and a label names one class for the life
    of a job) and `py_files` (.py/.zip/.egg paths the driver ships to every executor's Python workers
    before the version runs; empty when the module is already importable there)."""

    ref: str
    version: str
    py_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.ref, str) or not _REF.match(self.ref) or len(self.ref) > MAX_REF_CHARS:
            raise CodeVersionError(f"code ref must be package.module:Class (at most {MAX_REF_CHARS} characters), "
                                   f"got {self.ref!r:.80}")
        if (not isinstance(self.version, str) or not _VERSION.match(self.version)
                or len(self.version) > MAX_VERSION_CHARS):
            raise CodeVersionError(f"code version must be a label of letters, digits and . _ + - (at most "
                                   f"{MAX_VERSION_CHARS} characters, e.g. '2' or '2.1'), got {self.version!r:.80}")
        if len(self.py_files) > MAX_PY_FILES:
            raise CodeVersionError(f"at most {MAX_PY_FILES} py_files, got {len(self.py_files)}")
        for p in self.py_files:
            if (not isinstance(p, str) or not p or len(p) > MAX_PATH_CHARS or "\x00" in p
                    or not p.lower().endswith(PY_FILE_SUFFIXES)):
                raise CodeVersionError(f"each py_file must be a path ending in {'/'.join(PY_FILE_SUFFIXES)} (at most "
                                       f"{MAX_PATH_CHARS} characters), got {p!r:.80}")

    def to_dict(self) -> dict[str, Any]:
        files = {"py_files": list(self.py_files)} if self.py_files else {}
        return {"ref": self.ref, "version": self.version, **files}

    @classmethod
    def from_dict(cls, doc: Any) -> CodeVersion:
        """Parse a `code` object: ref and version required, py_files optional, nothing else."""
        if not isinstance(doc, dict):
            raise CodeVersionError(f"field 'code' must be an object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - {"ref", "version", "py_files"})
        if unknown:
            raise CodeVersionError(f"unknown field(s) {unknown[:5]} in 'code'; it has ref, version and py_files")
        files = doc.get("py_files", [])
        if not isinstance(files, list):
            raise CodeVersionError(f"code.py_files must be a list of paths, got {type(files).__name__}")
        return cls(ref=doc.get("ref"), version=doc.get("version"), py_files=tuple(files))  # type: ignore[arg-type]

    def describe(self) -> str:
        """How logs and reasons name it: `version 2 (pkg.mod:Class)`."""
        return f"version {self.version} ({self.ref})"
