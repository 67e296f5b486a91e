"""Alembic environment for the Ballast metrics DB (own version table, batch mode for SQLite)."""

from alembic import context
from sqlalchemy import create_engine, pool

from migrations_db.db import VERSION_TABLE, default_url
from migrations_db.models import Base

config = context.config
URL = config.get_main_option("sqlalchemy.url") or default_url()
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
