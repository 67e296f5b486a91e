"""migrations_db.db: one engine per URL and process, SQLite in WAL mode with a busy timeout, a
session scope that commits or rolls back whole, migrations to any revision under Ballast's own
version table, and an unreachable DB told apart from a wrong statement."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError

from migrations_db import models as m
from migrations_db.db import (
    ALEMBIC_DIR,
    VERSION_TABLE,
    alembic_config,
    get_engine,
    is_unreachable,
    migrate,
    session_scope,
)

pytestmark = pytest.mark.foundation


def _version(url: str) -> str:
    with create_engine(url).connect() as c:
        return c.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar_one()


def test_one_engine_per_url(tmp_path):
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    assert get_engine(a) is get_engine(a) and get_engine(a) is not get_engine(b)


def test_sqlite_is_opened_for_concurrent_writers(tmp_path):
    with get_engine(f"sqlite:///{tmp_path / 'w.db'}").connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert c.execute(text("PRAGMA busy_timeout")).scalar() == 30000
        assert c.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL


def test_a_session_scope_commits_whole_or_not_at_all(db_url):
    from datetime import UTC, datetime

    now = datetime(2026, 1, 1, tzinfo=UTC)
    with session_scope(db_url) as s:
        job = m.Job(job="j", operator="op", bins=8, created_at=now)
        s.add(job)
    assert job.bins == 8, "objects stay readable after the commit"
    with pytest.raises(IntegrityError), session_scope(db_url) as s:
        s.add(m.Job(job="k", operator="op", bins=8, created_at=now))
        s.flush()
        s.add(m.Job(job="j", operator="op", bins=16, created_at=now))  # the same primary key
        s.flush()
    with pytest.raises(RuntimeError, match="boom"), session_scope(db_url) as s:
        s.add(m.Job(job="l", operator="op", bins=8, created_at=now))
        s.flush()
        raise RuntimeError("boom")
    with session_scope(db_url) as s:
        assert [(r.job, r.bins) for r in s.query(m.Job).order_by(m.Job.job)] == [("j", 8)]


def test_migrate_goes_to_the_revision_asked_under_ballasts_version_table(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    migrate(url, "0002")
    assert _version(url) == "0002" and "driver_tokens" not in inspect(create_engine(url)).get_table_names()
    migrate(url)
    assert _version(url) == "0007" and "driver_tokens" in inspect(create_engine(url)).get_table_names()
    assert "alembic_version" not in inspect(create_engine(url)).get_table_names(), "Airflow's table name stays free"


def test_the_alembic_config_keeps_a_url_with_percent_signs():
    url = "postgresql+psycopg2://ballast:p%40ss%25word@db:5432/metrics"
    cfg = alembic_config(url)
    assert cfg.get_main_option("sqlalchemy.url") == url and cfg.get_main_option("script_location") == str(ALEMBIC_DIR)


def test_an_unreachable_db_is_told_apart_from_a_wrong_statement(tmp_path):
    with pytest.raises(OperationalError) as down:
        with get_engine(f"sqlite:///{tmp_path / 'no-such-dir' / 'm.db'}").connect():
            pass
    assert is_unreachable(down.value)
    assert is_unreachable(DBAPIError("SELECT 1", {}, Exception("reset"), connection_invalidated=True))
    assert not is_unreachable(DBAPIError("SELECT 1", {}, Exception("syntax")))
    assert not is_unreachable(IntegrityError("INSERT", {}, Exception("duplicate")))
    assert not is_unreachable(ValueError("not a DB error"))
