"""The metrics schema: Alembic upgrade -> downgrade -> upgrade on SQLite and real PostgreSQL."""

import pytest
from sqlalchemy import create_engine, inspect

from migrations_db.db import VERSION_TABLE, downgrade, get_engine, migrate
from migrations_db.models import Base

pytestmark = pytest.mark.foundation
TABLES = {t.name for t in Base.metadata.sorted_tables}


def _roundtrip(url: str) -> None:
    migrate(url)
    engine = create_engine(url)
    names = set(inspect(engine).get_table_names())
    assert TABLES <= names
    assert VERSION_TABLE in names and "alembic_version" not in names
    downgrade(url)
    assert set(inspect(engine).get_table_names()) - {VERSION_TABLE} == set()
    migrate(url)
    assert TABLES <= set(inspect(engine).get_table_names())
    migrate(url)  # idempotent
    engine.dispose()


def test_roundtrip_sqlite(tmp_path):
    _roundtrip(f"sqlite:///{tmp_path / 'm.db'}")


def test_models_match_migrations(tmp_path):
    """A model change without an Alembic revision fails here (autogenerate finds a diff)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate(url)
    with get_engine(url).connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    diff = [d for d in diff if not (d[0] == "remove_table" and d[1].name == VERSION_TABLE)]
    assert diff == []


@pytest.fixture(scope="module")
def postgres_url():
    stack = __import__("sys").modules["ballast_stack"]  # loaded by tests/conftest.py

    try:
        stack.postgres_up()
    except stack.StackError as exc:
        pytest.skip(f"PostgreSQL could not be installed or started here: {exc}")
    return stack.postgres_url()


def test_roundtrip_postgres(postgres_url):
    from sqlalchemy import text

    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text("DROP DATABASE IF EXISTS ballast_migrations_test"))
        c.execute(text("CREATE DATABASE ballast_migrations_test"))
    admin.dispose()
    _roundtrip(postgres_url.rsplit("/", 1)[0] + "/ballast_migrations_test")
