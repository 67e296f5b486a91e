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
MAX_SHADOW_EPOCHS = 1000
_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}\Z")
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*\Z")
_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*\Z")


class CodeVersionError(BallastError, ValueError):
    """An upgrade's code field that cannot be understood; the message says which part and why."""


@dataclass(frozen=True)
class ShadowSpec:
    """How an upgrade is tried before it takes over (Gloss's concurrent execution): for `epochs`
    epochs with input, the new version handles the same input as the version in force, on a copy of
    each key's state, and its outputs are held back and compared with the old version's; the step
    cuts over when the share of handler calls whose outputs differ (or that raise) is at most
    `tolerance`, else it is rejected and the version in force runs on. `fields`: the output fields
    compared (empty: whole rows)."""

    epochs: int = 3
    tolerance: float = 0.0
    fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        e = self.epochs
        if isinstance(e, bool) or not isinstance(e, int) or not 1 <= e <= MAX_SHADOW_EPOCHS:
            raise CodeVersionError(f"shadow.epochs must be an integer in 1..{MAX_SHADOW_EPOCHS}, got {e!r:.40}")
        if (isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float))
                or not 0.0 <= self.tolerance <= 1.0):
            raise CodeVersionError(f"shadow.tolerance must be a share in 0..1, got {self.tolerance!r:.40}")
        if len(self.fields) > 50 or not all(isinstance(f, str) and _FIELD.match(f) for f in self.fields):
            raise CodeVersionError(f"shadow.fields must be at most 50 output field names, got {self.fields!r:.80}")

    def to_dict(self) -> dict[str, Any]:
        fields = {"fields": list(self.fields)} if self.fields else {}
        return {"epochs": self.epochs, "tolerance": self.tolerance, **fields}

    @classmethod
    def from_dict(cls, doc: Any) -> ShadowSpec:
        if not isinstance(doc, dict) or set(doc) - {"epochs", "tolerance", "fields"}:
            raise CodeVersionError("code.shadow must be an object with epochs, tolerance and fields")
        fields = doc.get("fields", [])
        if not isinstance(fields, list):
            raise CodeVersionError(f"shadow.fields must be a list of names, got {type(fields).__name__}")
        tolerance = doc.get("tolerance", 0.0)
        if isinstance(tolerance, int) and not isinstance(tolerance, bool):
            tolerance = float(tolerance)  # JSON's 0 and 1
        return cls(epochs=doc.get("epochs", 3), tolerance=tolerance, fields=tuple(fields))


@dataclass(frozen=True)
class CodeVersion:
    """One version of a processor: `ref` (`package.module:Class`, the class to run), `version` (its
    label: the class's `ballast_version` must say the same, and a label names one class for the life
    of a job) and `py_files` (.py/.zip/.egg paths the driver ships to every executor's Python workers
    before the version runs; empty when the module is already importable there). `shadow`: try it
    beside the version in force first (`ShadowSpec`); None: it takes over at the step's epoch."""

    ref: str
    version: str
    py_files: tuple[str, ...] = ()
    shadow: ShadowSpec | None = None

    def __post_init__(self) -> None:
        if self.shadow is not None and not isinstance(self.shadow, ShadowSpec):
            raise CodeVersionError(f"code.shadow must be a ShadowSpec, got {type(self.shadow).__name__}")
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
        shadow = {"shadow": self.shadow.to_dict()} if self.shadow is not None else {}
        return {"ref": self.ref, "version": self.version, **files, **shadow}

    @classmethod
    def from_dict(cls, doc: Any) -> CodeVersion:
        """Parse a `code` object: ref and version required, py_files optional, nothing else."""
        if not isinstance(doc, dict):
            raise CodeVersionError(f"field 'code' must be an object, got {type(doc).__name__}")
        unknown = sorted(set(doc) - {"ref", "version", "py_files", "shadow"})
        if unknown:
            raise CodeVersionError(f"unknown field(s) {unknown[:5]} in 'code'; it has ref, version, py_files, shadow")
        files = doc.get("py_files", [])
        if not isinstance(files, list):
            raise CodeVersionError(f"code.py_files must be a list of paths, got {type(files).__name__}")
        shadow = ShadowSpec.from_dict(doc["shadow"]) if "shadow" in doc else None
        return cls(ref=doc.get("ref"), version=doc.get("version"), py_files=tuple(files),  # type: ignore[arg-type]
                   shadow=shadow)

    def describe(self) -> str:
        """How logs and reasons name it: `version 2 (pkg.mod:Class)`."""
        return f"version {self.version} ({self.ref})"

    @property
    def entry(self) -> CodeVersion:
        """This version as the job's history keeps it (how it was tried is the step's business)."""
        return CodeVersion(self.ref, self.version, self.py_files)
