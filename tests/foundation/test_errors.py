"""One exception base: a caller catches `BallastError` for anything Ballast raises on purpose,
and code that caught the built-in base (ValueError / RuntimeError) before still does."""

from __future__ import annotations

import importlib

import pytest

from ballast.errors import BallastError
from ballast.protocol import ProtocolError, step_from_document
from ballast.signing import KeyConfigError, parse_keys

pytestmark = pytest.mark.foundation

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
