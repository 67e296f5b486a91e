"""One exception base: a caller catches `BallastError` for anything Ballast raises on purpose,
and code that caught the built-in base (ValueError / RuntimeError) before still does."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

from ballast.errors import BallastError
from ballast.protocol import ProtocolError, step_from_document
from ballast.signing import KeyConfigError, parse_keys

pytestmark = pytest.mark.foundation
REPO = Path(__file__).resolve().parents[2]

# (module, class, the built-in base it had before BallastError existed)
ERRORS = [
    ("ballast.protocol", "ProtocolError", ValueError),
    ("ballast.signing", "SignatureError", ValueError),
    ("ballast.signing", "KeyConfigError", ValueError),
    ("ballast.kafka_security", "KafkaConfigError", ValueError),
    ("spark_jobs.durable", "StoreMismatch", RuntimeError),
    ("spark_jobs.durable", "StateGap", RuntimeError),
    ("spark_jobs.cache", "CacheError", RuntimeError),
    ("spark_jobs.journal", "JobMismatch", RuntimeError),
    ("scripts.spark_cluster", "ClusterError", RuntimeError),
    ("ballast.options", "ConfigError", ValueError),
    ("ballast.control.collect", "NotReady", RuntimeError),
    ("ballast.control.manual", "InvalidRequest", ValueError),
    ("ballast.control.plan", "PlanFailed", RuntimeError),
    ("ballast.deadlines", "DeadlineTooLong", ValueError),
    ("ballast.emitter", "EmitError", RuntimeError),
    ("ballast.store.plans", "PlanConflict", RuntimeError),
    ("ballast.store.fencing", "Fenced", RuntimeError),
    ("ballast.supervisor", "LaunchError", RuntimeError),
]


@pytest.mark.parametrize(("module", "name", "builtin"), ERRORS, ids=[f"{m}.{n}" for m, n, _ in ERRORS])
def test_each_error_derives_from_ballast_error_and_keeps_its_builtin_base(
    module: str, name: str, builtin: type[Exception]
) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, BallastError) and issubclass(cls, builtin)


def test_a_real_failure_is_caught_as_ballast_error_and_as_its_builtin_base() -> None:
    with pytest.raises(BallastError) as caught:
        step_from_document({"schema": "nope"})
    assert isinstance(caught.value, ProtocolError) and isinstance(caught.value, ValueError)
    with pytest.raises(ValueError):
        parse_keys('{"k1": "short"}', "test")
    with pytest.raises(BallastError) as caught_key:
        parse_keys('{"k1": "short"}', "test")
    assert isinstance(caught_key.value, KeyConfigError)
    assert "shorter than" in str(caught_key.value)


def test_ballast_error_is_not_a_catch_all() -> None:
    assert not issubclass(ValueError, BallastError) and not issubclass(KeyError, BallastError)


# Raised to stop a run on purpose, not an error: a caller catching BallastError must not swallow it.
NOT_ERRORS = {("spark_jobs/runner.py", "StopRequested")}
SCANNED = ("plugins/ballast", "spark_jobs", "migrations_db", "scripts")
BUILTIN_BASES = {"Exception", "ValueError", "RuntimeError", "KeyError", "LookupError", "OSError", "TypeError"}


def _exception_classes() -> dict[tuple[str, str], set[str]]:
    """{(file, class): base names} of every class in the shipped code and scripts that derives,
    directly or through another such class, from a built-in exception."""
    classes: dict[tuple[str, str], set[str]] = {}
    for root in SCANNED:
        for path in sorted((REPO / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef):
                    bases = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                             if isinstance(b, ast.Name | ast.Attribute)}
                    classes[(str(path.relative_to(REPO)), node.name)] = bases
    errors = {k for k, bases in classes.items() if bases & BUILTIN_BASES}
    while True:  # subclasses of those (SignatureError(ProtocolError), ...)
        names = {n for _, n in errors} | {"BallastError"}
        more = {k for k, bases in classes.items() if bases & names and k not in errors and k[1] != "BallastError"}
        if not more:
            return {k: classes[k] for k in errors}
        errors |= more


def test_every_project_exception_derives_from_ballast_error() -> None:
    found = _exception_classes()
    assert ("spark_jobs/durable.py", "StateGap") in found and ("plugins/ballast/protocol.py", "ProtocolError") in found
    names = {n for _, n in found}
    stray = sorted(f"{f}:{n} ({', '.join(sorted(b))})" for (f, n), b in found.items()
                   if (f, n) not in NOT_ERRORS and n != "BallastError" and not b & (names | {"BallastError"}))
    assert not stray, "derive these from ballast.errors.BallastError (keeping their built-in base): " + "; ".join(stray)
