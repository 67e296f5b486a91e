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
def postgres_url(postgres_base_url: str) -> str:
    """tests/conftest.py's PostgreSQL (started once, stopped at session end if the session started it;
    a cluster that cannot start fails the test rather than skipping it)."""
    return postgres_base_url


def _fresh_postgres_db(postgres_url: str, name: str) -> str:
    """An empty database `name` on the test cluster (dropped first if an earlier run left it)."""
    from sqlalchemy import text

    admin = create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        c.execute(text(f"CREATE DATABASE {name}"))
    admin.dispose()
    return postgres_url.rsplit("/", 1)[0] + "/" + name


def test_roundtrip_postgres(postgres_url):
    _roundtrip(_fresh_postgres_db(postgres_url, "ballast_migrations_test"))


def _upgrade_0003_with_old_data(url: str) -> None:
    """0003 on a DB that 0002 let drift: two open plans of one operator, duplicated NULL-epoch events."""
    from sqlalchemy import text

    migrate(url, "0002")
    engine = create_engine(url)
    plan = ("INSERT INTO plans (plan_id, job, operator, created_at, strategy, status, source_map_version, "
            "source_workers, target_workers, target_assignment, steps, params, reason) VALUES "
            "(:id, 'j', 'op', :at, 'fluid', :st, 0, 1, 2, '[0, 1]', 1, '{}', '')")
    event = ("INSERT INTO events (job, operator, at, level, kind, message, epoch, details) VALUES "
             "('j', 'op', '2026-01-01 00:00:00', 'error', 'plan_timeout', 'same', :epoch, '{}')")
    with engine.begin() as c:
        c.execute(text(plan), {"id": "old", "at": "2026-01-01 00:00:00", "st": "emitting"})
        c.execute(text(plan), {"id": "new", "at": "2026-01-02 00:00:00", "st": "planned"})
        c.execute(text(plan), {"id": "done", "at": "2026-01-01 00:00:00", "st": "completed"})
        for epoch in (None, None, 7, 8):
            c.execute(text(event), {"epoch": epoch})
    migrate(url)
    with engine.connect() as c:
        status = dict(c.execute(text("SELECT plan_id, status FROM plans")).all())
        events = sorted(c.execute(text("SELECT dedup_epoch FROM events")).scalars())
    assert status == {"old": "failed", "new": "planned", "done": "completed"}
    assert events == [-1, 7, 8]  # the two equal control-plane events are one now
    downgrade(url, "0002")
    with engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM events")).scalar() == 3
    engine.dispose()


def test_0003_closes_extra_open_plans_and_dedups_events_sqlite(tmp_path):
    _upgrade_0003_with_old_data(f"sqlite:///{tmp_path / 'm.db'}")


def test_0003_closes_extra_open_plans_and_dedups_events_postgres(postgres_url):
    _upgrade_0003_with_old_data(_fresh_postgres_db(postgres_url, "ballast_migrations_0003"))


def test_alembic_without_a_url_says_where_the_url_comes_from():
    """The schema has no default URL of its own (it imports nothing of Ballast's): a bare run is refused."""
    from alembic import command
    from alembic.config import Config

    from migrations_db.db import ALEMBIC_DIR

    cfg = Config()
    cfg.set_main_option("script_location", str(ALEMBIC_DIR))
    with pytest.raises(SystemExit, match=r"no metrics DB URL: run `python -m ballast.store upgrade`"):
        command.upgrade(cfg, "head")
