"""Alembic environment for the Ballast metrics DB (own version table, batch mode for SQLite)."""

from alembic import context
from sqlalchemy import create_engine, pool

from migrations_db.db import VERSION_TABLE
from migrations_db.models import Base

config = context.config
URL = config.get_main_option("sqlalchemy.url")
if not URL:  # migrations_db.db.alembic_config sets it; a bare `alembic` run must too
    raise SystemExit("no metrics DB URL: run `python -m ballast.store upgrade` (BALLAST_DB_URL), "
                     "or set sqlalchemy.url in migrations_db/alembic.ini for a bare `alembic` run")
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=URL,
        target_metadata=target_metadata,
        literal_binds=True,
        version_table=VERSION_TABLE,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = create_engine(URL, poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            version_table=VERSION_TABLE,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
