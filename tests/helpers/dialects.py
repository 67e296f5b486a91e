"""The metrics-DB fixture for tests that must hold on both dialects the project supports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from migrations_db.db import get_engine, migrate


@pytest.fixture(params=["sqlite", "postgres"])
def any_db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh migrated metrics DB on SQLite, then on the stack's real PostgreSQL."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'metrics.db'}"
        migrate(url)
        yield url
        return
    base = request.getfixturevalue("postgres_base_url")  # tests/conftest.py: started once per session
    name = f"ballast_own_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"CREATE DATABASE {name}"))
    url = base.rsplit("/", 1)[0] + "/" + name
    migrate(url)
    yield url
    get_engine(url).dispose()
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()
